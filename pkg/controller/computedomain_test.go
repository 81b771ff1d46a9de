package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func with(j *v1alpha1.TrainingJob, mutate func(*v1alpha1.TrainingJob)) *v1alpha1.TrainingJob {
	mutate(j)
	return j
}

func TestPlanComputeDomain(t *testing.T) {
	job := func(level string, policy v1alpha1.ComputeDomainPolicy, masterGPUs, workers int32) *v1alpha1.TrainingJob {
		j := utiltesting.MakeTrainingJob("train", "ml").Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, envtestTemplate(int64(masterGPUs))).
			Role(v1alpha1.ReplicaWorker, workers, envtestTemplate(4)).Obj()
		if level != "" {
			j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: level, Mode: v1alpha1.TopologyRequired, ComputeDomain: policy}
		}
		return j
	}
	want := func(n int) *computeDomainPlan {
		return &computeDomainPlan{name: "train-compute-domain", template: "train-channel", numNodes: n}
	}
	cases := []struct {
		name string
		job  *v1alpha1.TrainingJob
		topo lockstep.TopologyConfig
		want *computeDomainPlan
	}{
		{name: "clique gang of four GPU pods", job: job("clique", "", 4, 3), topo: lockstep.DefaultTopologyConfig(), want: want(4)},
		{name: "Auto is the default", job: job("clique", v1alpha1.ComputeDomainAuto, 4, 3), topo: lockstep.DefaultTopologyConfig(), want: want(4)},
		{name: "a master without GPUs does not join", job: job("clique", "", 0, 3), topo: lockstep.DefaultTopologyConfig(), want: want(3)},
		{name: "opted out", job: job("clique", v1alpha1.ComputeDomainDisabled, 4, 3), topo: lockstep.DefaultTopologyConfig()},
		{name: "one GPU pod needs no IMEX channel", job: job("clique", "", 0, 1), topo: lockstep.DefaultTopologyConfig()},
		{name: "a network level", job: job("leaf", "", 4, 3), topo: lockstep.DefaultTopologyConfig()},
		{name: "no constraint", job: job("", "", 4, 3), topo: lockstep.DefaultTopologyConfig()},
		{name: "the level is not NVLink in this cluster", job: job("clique", "", 4, 3),
			topo: lockstep.TopologyConfig{Levels: []lockstep.Level{{Name: "clique", LabelKey: "example.com/clique"}}}},
		{name: "an NVLink level of another name", job: job("rack", "", 4, 3),
			topo: lockstep.TopologyConfig{Levels: []lockstep.Level{{Name: "rack", LabelKey: "example.com/rack", NVLink: true}}}, want: want(4)},
		// Sized for what runs: the driver holds every pod until numNodes
		// IMEX daemons are ready.
		{name: "elastic: the minimum Workers and the Master", job: with(job("clique", "", 4, 6), func(j *v1alpha1.TrainingJob) {
			j.Spec.ElasticPolicy = &v1alpha1.ElasticPolicy{MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](6)}
		}), topo: lockstep.DefaultTopologyConfig(), want: want(3)},
		{name: "minAvailable below the replicas", job: with(job("clique", "", 4, 7), func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](5)}}
		}), topo: lockstep.DefaultTopologyConfig(), want: want(5)},
		{name: "minAvailable counts a GPU-less master as one of its pods", job: with(job("clique", "", 0, 7), func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](5)}}
		}), topo: lockstep.DefaultTopologyConfig(), want: want(4)},
		{name: "minAvailable of one: a domain of one node", job: with(job("clique", "", 4, 3), func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{SchedulingPolicy: &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](1)}}
		}), topo: lockstep.DefaultTopologyConfig(), want: want(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, ok := planComputeDomain(tc.job, tc.topo, claimGPUs{})
			var got *computeDomainPlan
			if ok {
				got = &plan
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(computeDomainPlan{})); diff != "" {
				t.Errorf("planComputeDomain (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestAddChannelClaim(t *testing.T) {
	gpu := func(name string, n int64) corev1.Container {
		c := corev1.Container{Name: name}
		if n > 0 {
			c.Resources.Limits = corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
		}
		return c
	}
	claimed := func(c corev1.Container) corev1.Container {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: computeDomainClaim})
		return c
	}
	podClaim := corev1.PodResourceClaim{Name: computeDomainClaim, ResourceClaimTemplateName: ptr.To("train-channel")}
	cases := []struct {
		name       string
		spec, want corev1.PodSpec
	}{
		{
			name: "the GPU container claims the channel, the sidecar does not",
			spec: corev1.PodSpec{Containers: []corev1.Container{gpu("train", 4), gpu("logs", 0)}},
			want: corev1.PodSpec{Containers: []corev1.Container{claimed(gpu("train", 4)), gpu("logs", 0)},
				ResourceClaims: []corev1.PodResourceClaim{podClaim}},
		},
		{
			name: "a pod without GPUs does not join",
			spec: corev1.PodSpec{Containers: []corev1.Container{gpu("launcher", 0)}},
			want: corev1.PodSpec{Containers: []corev1.Container{gpu("launcher", 0)}},
		},
		{
			name: "claims of the template are kept, and none is added twice",
			spec: corev1.PodSpec{Containers: []corev1.Container{claimed(gpu("train", 4))},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "scratch"}, podClaim}},
			want: corev1.PodSpec{Containers: []corev1.Container{claimed(gpu("train", 4))},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "scratch"}, podClaim}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addChannelClaim(&tc.spec, "train-channel", claimGPUs{})
			if diff := cmp.Diff(tc.want, tc.spec); diff != "" {
				t.Errorf("pod spec (-want,+got):\n%s", diff)
			}
		})
	}
}
