package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestElasticGangAndAutoscaler(t *testing.T) {
	cpu := []autoscalingv2.MetricSpec{{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
		},
	}}
	elastic := func(min, max int32, metrics []autoscalingv2.MetricSpec) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			w := j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
			w.Replicas = ptr.To[int32](4)
			j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = w
			j.Spec.ElasticPolicy = &v1alpha1.ElasticPolicy{MinReplicas: ptr.To(min), MaxReplicas: ptr.To(max), Metrics: metrics}
		}
	}
	tests := []struct {
		name          string
		job           *v1alpha1.TrainingJob
		wantMinMember int32
		wantHPA       *autoscalingv2.HorizontalPodAutoscalerSpec
	}{{
		name:          "fixed size: every pod, no autoscaler",
		job:           testJob(v1alpha1.RestartOnFailure),
		wantMinMember: 3,
	}, {
		name:          "elastic: the Master and minReplicas Workers",
		job:           testJob(v1alpha1.RestartOnFailure, elastic(2, 6, nil)),
		wantMinMember: 3,
	}, {
		name: "minAvailable wins",
		job: testJob(v1alpha1.RestartOnFailure, elastic(2, 6, nil), func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](5)}}
		}),
		wantMinMember: 5,
	}, {
		name:          "elastic with metrics: an HPA on the job's /scale within the bounds",
		job:           testJob(v1alpha1.RestartOnFailure, elastic(2, 6, cpu)),
		wantMinMember: 3,
		wantHPA: &autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "lockstep.dev/v1alpha1", Kind: "TrainingJob", Name: "j"},
			MinReplicas:    ptr.To[int32](2),
			MaxReplicas:    6,
			Metrics:        cpu,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := minMember(tt.job); got != tt.wantMinMember {
				t.Errorf("minMember = %d, want %d", got, tt.wantMinMember)
			}
			var got *autoscalingv2.HorizontalPodAutoscalerSpec
			if hpa := desiredAutoscaler(tt.job); hpa != nil {
				got = &hpa.Spec
				if hpa.Name != tt.job.Name || hpa.Namespace != tt.job.Namespace {
					t.Errorf("HPA %s/%s, want the job's name and namespace", hpa.Namespace, hpa.Name)
				}
			}
			if d := cmp.Diff(tt.wantHPA, got); d != "" {
				t.Errorf("HPA spec (-want,+got):\n%s", d)
			}
		})
	}
	if got, want := roleSelector(testJob(v1alpha1.RestartOnFailure), v1alpha1.ReplicaWorker), "lockstep.dev/job-name=j,lockstep.dev/replica-type=Worker"; got != want {
		t.Errorf("roleSelector = %q, want %q", got, want)
	}
}
