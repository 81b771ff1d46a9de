package main

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// gpuClaim is the pod claim a DRA job's containers get their GPUs from.
const gpuClaim = "gpus"

// jobObjects are the objects a trace entry becomes, in the order they are
// created: with the device plugin its TrainingJob (trainingJob); with DRA
// first the ResourceClaimTemplate its replicas' claims are made from, so
// no pod waits for a template that is not there yet, then the TrainingJob
// (draTrainingJob).
func jobObjects(j bench.Job, compression float64, driver string) []client.Object {
	if driver != bench.GPUDriverDRA {
		return []client.Object{trainingJob(j, compression)}
	}
	tj, template := draTrainingJob(j, compression)
	if template == nil {
		return []client.Object{tj}
	}
	return []client.Object{template, tj}
}

// draTrainingJob is trainingJob for a cluster whose GPUs NVIDIA's DRA
// driver serves, with the ResourceClaimTemplate named after the job that
// its replicas claim their GPUs through: each replica's claim asks for
// GPUsPerReplica devices of DeviceClass gpu.nvidia.com, as a user's would,
// instead of nvidia.com/gpu. A job without GPUs gets no template. The
// template is the namespace's, which goes with the replay's cluster.
func draTrainingJob(j bench.Job, compression float64) (*v1alpha1.TrainingJob, *resourcev1.ResourceClaimTemplate) {
	tj := trainingJob(j, compression)
	if j.GPUsPerReplica == 0 {
		return tj, nil
	}
	template := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: j.ID, Namespace: benchNamespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: gpuClaim, Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: lockstep.DRAGPUDeviceClass,
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
				Count:           int64(j.GPUsPerReplica),
			}}},
		}}},
	}
	for rt, spec := range tj.Spec.ReplicaSpecs {
		// trainingJob's replica types share one container slice.
		spec.Template = *spec.Template.DeepCopy()
		pod := &spec.Template.Spec
		pod.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: gpuClaim}}}
		pod.ResourceClaims = []corev1.PodResourceClaim{{Name: gpuClaim, ResourceClaimTemplateName: ptr.To(template.Name)}}
		tj.Spec.ReplicaSpecs[rt] = spec
	}
	return tj, template
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
