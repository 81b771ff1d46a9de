package main

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
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
// with the trace's topology constraint and priority class. The pods run
// until the benchmark releases the whole gang (see observer.release).
//
// The trace's jobs never fail: a restart is a preemption (the controller
// restarts a preempted gang whole). So the restart backoff is the
// controller's default divided by the replay's time compression, like every
// other duration of the replay, and the backoffLimit is high enough that a
// job preempted again and again still runs to the end (on main a
// preemption still counts against it).
func trainingJob(j bench.Job, compression float64) *v1alpha1.TrainingJob {
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
			// A preemption restarts the job at once and is no failure;
			// failures, which the trace has none of, back off on the
			// replay's clock.
			RunPolicy: &v1alpha1.RunPolicy{RestartBackoff: restartBackoff(compression)},
		},
	}
	if j.Priority != "" {
		tj.Spec.RunPolicy.SchedulingPolicy = &v1alpha1.SchedulingPolicy{PriorityClass: j.Priority}
	}
	if j.Topology != nil {
		tj.Spec.Topology = &v1alpha1.TopologyConstraint{Level: j.Topology.Level, Mode: v1alpha1.TopologyMode(j.Topology.Mode)}
	}
	return tj
}

// restartBackoff is the controller's default restart backoff with its
// delays divided by compression, floored at the 1 s the API allows.
func restartBackoff(compression float64) *v1alpha1.RestartBackoff {
	scale := func(seconds int32) *int32 {
		return ptr.To(max(1, int32(math.Round(float64(seconds)/max(1, compression)))))
	}
	return &v1alpha1.RestartBackoff{
		InitialSeconds:    scale(v1alpha1.DefaultRestartInitialSeconds),
		MaxSeconds:        scale(v1alpha1.DefaultRestartMaxSeconds),
		ResetAfterSeconds: scale(v1alpha1.DefaultRestartResetAfterSeconds),
	}
}

// priorityClass is the PriorityClass object of one of the benchmark's
// classes.
func priorityClass(c bench.PriorityClass) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: c.Name},
		Value:       c.Value,
		Description: "lockstep-bench: a priority class of the priority trace (bench.PriorityClasses)",
	}
}
