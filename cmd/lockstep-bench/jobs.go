package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// benchNamespace holds every job of a replay.
const benchNamespace = "bench"

// trainingJob is the TrainingJob a trace entry becomes: a PyTorch job of
// one Master and Replicas−1 Workers, each asking for GPUsPerReplica GPUs,
// with the trace's topology constraint. The pods run until the benchmark
// releases the whole gang (see observer.release).
func trainingJob(j bench.Job) *v1alpha1.TrainingJob {
	template := corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "trainer",
				// Never pulled: KWOK nodes run no containers.
				Image: "registry.example/lockstep/bench-trainer:v1",
			}},
		},
	}
	if j.GPUsPerReplica > 0 {
		gpus := *resource.NewQuantity(int64(j.GPUsPerReplica), resource.DecimalSI)
		template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{lockstep.GPUResource: gpus},
			Limits:   corev1.ResourceList{lockstep.GPUResource: gpus},
		}
	}
	specs := map[v1alpha1.ReplicaType]v1alpha1.ReplicaSpec{
		v1alpha1.ReplicaMaster: {Replicas: ptr.To[int32](1), RestartPolicy: v1alpha1.RestartNever, Template: template},
	}
	if j.Replicas > 1 {
		specs[v1alpha1.ReplicaWorker] = v1alpha1.ReplicaSpec{
			Replicas: ptr.To(int32(j.Replicas - 1)), RestartPolicy: v1alpha1.RestartNever, Template: template,
		}
	}
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: j.ID, Namespace: benchNamespace},
		Spec: v1alpha1.TrainingJobSpec{
			Framework:    v1alpha1.FrameworkPyTorch,
			ReplicaSpecs: specs,
		},
	}
	if j.Topology != nil {
		tj.Spec.Topology = &v1alpha1.TopologyConstraint{Level: j.Topology.Level, Mode: v1alpha1.TopologyMode(j.Topology.Mode)}
	}
	return tj
}
