package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestJobObjects(t *testing.T) {
	gang := bench.Job{ID: "gang", Replicas: 4, GPUsPerReplica: 8, Duration: time.Minute, Topology: &bench.Constraint{Level: "leaf", Mode: bench.ModeRequired}}
	cpuOnly := bench.Job{ID: "cpu", Replicas: 2, Duration: time.Minute}
	// claimed is what a DRA replica's pod spec holds instead of
	// nvidia.com/gpu.
	claimed := func(template string) corev1.PodSpec {
		return corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "trainer",
				Image:     "registry.example/lockstep/bench-trainer:v1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)}},
		}
	}
	tests := []struct {
		name   string
		job    bench.Job
		driver string
		// wantTemplate is the ResourceClaimTemplate created first; nil
		// when only the TrainingJob is.
		wantTemplate *resourcev1.ResourceClaimTemplate
		// wantPods is every replica type's pod spec; nil keeps
		// trainingJob's.
		wantPods *corev1.PodSpec
	}{
		{name: "device plugin: the TrainingJob alone", job: gang, driver: bench.GPUDriverDevicePlugin},
		{
			name: "DRA: a template of the replica's GPUs, then the job whose pods claim from it", job: gang, driver: bench.GPUDriverDRA,
			wantTemplate: &resourcev1.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: benchNamespace},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
					Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
						DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 8,
					}}},
				}}},
			},
			wantPods: ptr.To(claimed("gang")),
		},
		{name: "DRA: a job without GPUs claims none", job: cpuOnly, driver: bench.GPUDriverDRA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := jobObjects(tc.job, 60, tc.driver)
			var want []client.Object
			if tc.wantTemplate != nil {
				want = append(want, tc.wantTemplate)
			}
			tj := trainingJob(tc.job, 60)
			if tc.wantPods != nil {
				for rt, spec := range tj.Spec.ReplicaSpecs {
					spec.Template.Spec = *tc.wantPods
					tj.Spec.ReplicaSpecs[rt] = spec
				}
			}
			want = append(want, tj)
			if diff := cmp.Diff(want, objs); diff != "" {
				t.Errorf("jobObjects (-want,+got):\n%s", diff)
			}
			got, ok := objs[len(objs)-1].(*v1alpha1.TrainingJob)
			if !ok {
				t.Fatalf("the last object is a %T, want the TrainingJob", objs[len(objs)-1])
			}
			if errs := got.Validate(); len(errs) > 0 {
				t.Errorf("invalid TrainingJob: %v", errs.ToAggregate())
			}
		})
	}
}

// BenchmarkJobObjects builds a 4×8 gang's objects, once per submission of
// the replay.
func BenchmarkJobObjects(b *testing.B) {
	gang := bench.Job{ID: "gang", Replicas: 4, GPUsPerReplica: 8, Duration: time.Minute}
	for _, driver := range []string{bench.GPUDriverDevicePlugin, bench.GPUDriverDRA} {
		b.Run("driver="+driver, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = jobObjects(gang, 60, driver)
			}
		})
	}
}
