package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TestSchedulingErrorsReachTheJob submits jobs that cannot be placed, each
// for another reason, and checks that the TrainingJob itself says why, as a
// Scheduled=False condition naming the cause and as an event, within
// seconds of its creation.
func TestSchedulingErrorsReachTheJob(t *testing.T) {
	gpus := func(n int64) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			for role, r := range j.Spec.ReplicaSpecs {
				r.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
				j.Spec.ReplicaSpecs[role] = r
			}
		}
	}
	cases := []struct {
		name    string
		workers int32
		mutate  []func(*v1alpha1.TrainingJob)
		reason  string
		// message must contain each of these.
		message []string
	}{{
		name:    "rack",
		workers: 1,
		mutate: []func(*v1alpha1.TrainingJob){func(j *v1alpha1.TrainingJob) {
			j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "rack", Mode: v1alpha1.TopologyRequired}
		}},
		reason:  controller.ReasonUnknownTopologyLevel,
		message: []string{`spec.topology.level "rack"`, "leaf", "spine"},
	}, {
		name:    "huge",
		workers: 39, // 40 pods of 8 GPUs on a 256-GPU cluster
		mutate:  []func(*v1alpha1.TrainingJob){gpus(8)},
		reason:  controller.ReasonGangLargerThanCluster,
		message: []string{"needs 320", "have 256"},
	}, {
		name:    "nowhere",
		workers: 1,
		mutate: []func(*v1alpha1.TrainingJob){gpus(1), func(j *v1alpha1.TrainingJob) {
			for role, r := range j.Spec.ReplicaSpecs {
				r.Template.Spec.NodeSelector = map[string]string{"example.com/no-such-pool": "x"}
				j.Spec.ReplicaSpecs[role] = r
			}
		}},
		reason:  controller.ReasonUnschedulable,
		message: []string{"pod nowhere-"},
	}, {
		name:    "wideleaf",
		workers: 9, // 10 × 8 GPUs in one 64-GPU leaf
		mutate: []func(*v1alpha1.TrainingJob){gpus(8), func(j *v1alpha1.TrainingJob) {
			j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "leaf", Mode: v1alpha1.TopologyRequired}
		}},
		reason:  controller.ReasonUnschedulable,
		message: []string{"pod wideleaf-", "leaf"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := cluster.NewNamespace(t)
			job := pytorchJob(ns, tc.name, tc.workers)
			for _, m := range tc.mutate {
				m(job)
			}
			createJob(t, job)
			got := waitJob(t, ns, job.Name, 20*time.Second, "Scheduled=False "+tc.reason, func(j *v1alpha1.TrainingJob) bool {
				c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == tc.reason
			})
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionScheduled)
			for _, want := range tc.message {
				if !strings.Contains(c.Message, want) {
					t.Errorf("Scheduled condition message %q lacks %q", c.Message, want)
				}
			}
			if err := waitEvent(ns, "TrainingJob", job.Name, tc.reason, ""); err != nil {
				t.Error(err)
			}
			if pods, err := jobPodsOf(ctx, ns, job.Name); err == nil {
				for _, p := range pods {
					if p.Spec.NodeName != "" {
						t.Errorf("pod %s of a gang that cannot be placed is bound to %s", p.Name, p.Spec.NodeName)
					}
				}
			}
		})
	}
}
