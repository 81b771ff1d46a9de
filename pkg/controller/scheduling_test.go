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
		name:        "a Kueue annotation naming no level's node label names the field",
		job:         testJob("", withGPUs(8), kueueAnnotation(v1alpha1.ReplicaWorker, lockstep.AnnotationKueueRequiredTopology, "example.com/rack")),
		clusterGPUs: 256,
		want: &schedulingProblem{ReasonUnknownTopologyLevel,
			`spec.replicaSpecs[Worker].template.metadata.annotations: annotation kueue.x-k8s.io/podset-required-topology="example.com/rack" is no node label of a configured topology level; use one of kubernetes.io/hostname, nvidia.com/gpu.clique, fabric.topograph.run/tier-0, fabric.topograph.run/tier-1, fabric.topograph.run/tier-2`},
	}, {
		name:        "spec.topology wins over a bad Kueue annotation",
		job:         testJob("", withGPUs(8), level("leaf"), kueueAnnotation(v1alpha1.ReplicaWorker, lockstep.AnnotationKueueRequiredTopology, "example.com/rack")),
		clusterGPUs: 256,
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

// kueueAnnotation sets a Kueue TAS annotation on a role's template.
func kueueAnnotation(role v1alpha1.ReplicaType, key, value string) func(*v1alpha1.TrainingJob) {
	return func(j *v1alpha1.TrainingJob) {
		r := j.Spec.ReplicaSpecs[role]
		r.Template.Annotations = map[string]string{key: value}
		j.Spec.ReplicaSpecs[role] = r
	}
}

// TestKueueConstraint: Kueue TAS's annotations on the replica templates
// become the PodGroup's topology annotations when spec.topology is unset.
func TestKueueConstraint(t *testing.T) {
	type want struct {
		Annotations map[string]string
		Err         string
	}
	both := func(key, value string) func(*v1alpha1.TrainingJob) {
		return func(j *v1alpha1.TrainingJob) {
			kueueAnnotation(v1alpha1.ReplicaMaster, key, value)(j)
			kueueAnnotation(v1alpha1.ReplicaWorker, key, value)(j)
		}
	}
	for _, tc := range []struct {
		name string
		job  *v1alpha1.TrainingJob
		want want
	}{
		{name: "none", job: testJob("")},
		{name: "required leaf on every role", job: testJob("", both(lockstep.AnnotationKueueRequiredTopology, lockstep.LabelFabricTier0)),
			want: want{Annotations: map[string]string{lockstep.AnnotationTopologyLevel: "leaf", lockstep.AnnotationTopologyMode: "Required"}}},
		{name: "preferred spine on one role", job: testJob("", kueueAnnotation(v1alpha1.ReplicaWorker, lockstep.AnnotationKueuePreferredTopology, lockstep.LabelFabricTier1)),
			want: want{Annotations: map[string]string{lockstep.AnnotationTopologyLevel: "spine", lockstep.AnnotationTopologyMode: "Preferred"}}},
		{name: "spec.topology wins", job: testJob("", both(lockstep.AnnotationKueueRequiredTopology, lockstep.LabelFabricTier0), func(j *v1alpha1.TrainingJob) {
			j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "spine", Mode: "Preferred"}
		}), want: want{Annotations: map[string]string{lockstep.AnnotationTopologyLevel: "spine", lockstep.AnnotationTopologyMode: "Preferred"}}},
		{name: "roles disagree", job: testJob("",
			kueueAnnotation(v1alpha1.ReplicaMaster, lockstep.AnnotationKueueRequiredTopology, lockstep.LabelFabricTier0),
			kueueAnnotation(v1alpha1.ReplicaWorker, lockstep.AnnotationKueueRequiredTopology, lockstep.LabelFabricTier1)),
			want: want{Err: "spec.replicaSpecs[Worker].template.metadata.annotations names spine/Required but spec.replicaSpecs[Master].template.metadata.annotations names leaf/Required: a gang has one topology constraint; annotate every role alike, or set spec.topology"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got want
			if _, _, err := kueueConstraint(tc.job, lockstep.DefaultTopologyConfig()); err != nil {
				got.Err = err.Error()
			}
			pg, err := desiredPodGroup(tc.job, mustAdapter(t, tc.job), lockstep.DefaultTopologyConfig())
			if err != nil {
				t.Fatal(err)
			}
			got.Annotations = pg.Annotations
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("constraint (-want,+got):\n%s", diff)
			}
		})
	}
}
