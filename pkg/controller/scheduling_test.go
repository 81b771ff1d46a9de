package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestSchedulingProblems(t *testing.T) {
	withGPUs := func(n int64) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			for role, r := range j.Spec.ReplicaSpecs {
				r.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
				j.Spec.ReplicaSpecs[role] = r
			}
		}
	}
	level := func(l string) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) { j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: l} }
	}
	unschedulable := func(pods []*corev1.Pod, i int, msg string) []*corev1.Pod {
		pods[i].Spec.NodeName = ""
		pods[i].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
		return pods
	}
	cases := []struct {
		name        string
		job         *v1alpha1.TrainingJob
		clusterGPUs int64
		pods        []*corev1.Pod
		want        *schedulingProblem
	}{{
		name:        "fits",
		job:         testJob("", withGPUs(8), level("leaf")),
		clusterGPUs: 256,
		pods:        testGang(corev1.PodRunning, corev1.PodRunning, corev1.PodRunning),
	}, {
		name:        "unknown level names the field and the levels",
		job:         testJob("", withGPUs(8), level("rack")),
		clusterGPUs: 256,
		want: &schedulingProblem{ReasonUnknownTopologyLevel,
			`spec.topology.level "rack" is not a level of the cluster's topology; use one of host, clique, leaf, spine, block, cluster`},
	}, {
		name:        "implicit levels are levels",
		job:         testJob("", withGPUs(8), level("host")),
		clusterGPUs: 256,
	}, {
		name:        "more GPUs than the cluster",
		job:         testJob("", withGPUs(128)),
		clusterGPUs: 256,
		want: &schedulingProblem{ReasonGangLargerThanCluster,
			"the gang needs 384 nvidia.com/gpu but all of the cluster's nodes together have 256: lower the replicas or the GPUs per pod, or add nodes"},
	}, {
		name:        "CPU-only jobs are not checked against GPUs",
		job:         testJob(""),
		clusterGPUs: 0,
	}, {
		name:        "the scheduler's word on the first pod it could not place",
		job:         testJob("", withGPUs(8)),
		clusterGPUs: 256,
		pods: unschedulable(unschedulable(testGang(corev1.PodPending, corev1.PodPending, corev1.PodPending), 2, "later"), 1,
			"0/32 nodes are available: PodGroup ns/j: Required constraint on leaf"),
		want: &schedulingProblem{ReasonUnschedulable, "pod j-worker-0: 0/32 nodes are available: PodGroup ns/j: Required constraint on leaf"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := topologyLevelProblem(tc.job, lockstep.DefaultTopologyConfig())
			if got == nil {
				got = capacityProblem(tc.job, tc.clusterGPUs)
			}
			if got == nil {
				a := mustAdapter(t, tc.job)
				got = unschedulablePod(observe(tc.job, tc.pods, framework.EffectiveRestartScope(a, tc.job)))
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(schedulingProblem{})); diff != "" {
				t.Errorf("problem (-want,+got):\n%s", diff)
			}
		})
	}
}
