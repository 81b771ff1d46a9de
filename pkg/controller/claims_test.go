package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// draTemplate is a pod template whose container asks for GPUs through the
// claim template named template.
func draTemplate(template string) corev1.PodTemplateSpec {
	tpl := envtestTemplate(0)
	tpl.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)}}
	tpl.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	return tpl
}

// channelTemplate is a claim template of another device class: a
// ComputeDomain's channel, which is no GPU.
func channelTemplate(name, ns string) *resourcev1.ResourceClaimTemplate {
	t := utiltesting.MakeGPUClaimTemplate(name, ns, 1)
	t.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "compute-domain-default-channel.nvidia.com"
	return t
}

// readClaimGPUs reads each template and claim a job's pods name once, notes
// those missing, and counts what each asks for as gpuclaim.Count does; a
// job that names none reads nothing.
func TestReadClaimGPUs(t *testing.T) {
	gpuClaim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "ml"},
		Spec: utiltesting.MakeGPUClaimTemplate("", "", 2).Spec.Spec}
	objs := []client.Object{
		utiltesting.MakeGPUClaimTemplate("four", "ml", 4),
		utiltesting.MakeGPUClaimTemplate("four", "other", 8),
		channelTemplate("channel", "ml"),
		gpuClaim,
	}
	named := func(claim string) corev1.PodTemplateSpec {
		tpl := envtestTemplate(0)
		tpl.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(claim)}}
		return tpl
	}
	cases := []struct {
		name string
		job  *v1alpha1.TrainingJob
		want claimGPUs
	}{{
		name: "no claims",
		job:  pyTorchJob("ml", "pt"),
	}, {
		name: "a GPU template, read once for two roles",
		job: utiltesting.MakeTrainingJob("pt", "ml").Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, draTemplate("four")).Role(v1alpha1.ReplicaWorker, 3, draTemplate("four")).Obj(),
		want: claimGPUs{templates: map[string]int64{"four": 4}, claims: map[string]int64{}},
	}, {
		name: "a template of another class asks for no GPUs",
		job:  utiltesting.MakeTrainingJob("pt", "ml").Framework(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 2, draTemplate("channel")).Obj(),
		want: claimGPUs{templates: map[string]int64{"channel": 0}, claims: map[string]int64{}},
	}, {
		name: "a claim named directly",
		job:  utiltesting.MakeTrainingJob("pt", "ml").Framework(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 2, named("shared")).Obj(),
		want: claimGPUs{templates: map[string]int64{}, claims: map[string]int64{"shared": 2}},
	}, {
		name: "missing template and claim",
		job: utiltesting.MakeTrainingJob("pt", "ml").Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, named("gone")).Role(v1alpha1.ReplicaWorker, 3, draTemplate("later")).Obj(),
		want: claimGPUs{templates: map[string]int64{}, claims: map[string]int64{},
			missing: []string{"ResourceClaim ml/gone", "ResourceClaimTemplate ml/later"}},
	}, {
		name: "missing template only",
		job:  utiltesting.MakeTrainingJob("pt", "ml").Framework(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 3, draTemplate("later")).Obj(),
		want: claimGPUs{templates: map[string]int64{}, claims: map[string]int64{},
			missing: []string{"ResourceClaimTemplate ml/later"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(objs...).Build()
			got, err := fakeReconciler(c).readClaimGPUs(context.Background(), tc.job)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(claimGPUs{})); diff != "" {
				t.Errorf("readClaimGPUs (-want,+got):\n%s", diff)
			}
		})
	}
}

// A pod's GPUs are its nvidia.com/gpu limits and its GPU claims, each
// claim once however many containers use it; a container asks for GPUs
// when it uses a GPU claim.
func TestClaimGPUsOfPod(t *testing.T) {
	claims := claimGPUs{templates: map[string]int64{"four": 4, "channel": 0}, claims: map[string]int64{"shared": 2}}
	gpuLimit := envtestTemplate(8).Spec.Containers[0]
	uses := func(name string, claimNames ...string) corev1.Container {
		c := corev1.Container{Name: name}
		for _, n := range claimNames {
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: n})
		}
		return c
	}
	podClaims := []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptr.To("four")},
		{Name: "channel", ResourceClaimTemplateName: ptr.To("channel")},
		{Name: "shared", ResourceClaimName: ptr.To("shared")},
		{Name: "unknown", ResourceClaimTemplateName: ptr.To("not-the-jobs")},
	}
	cases := []struct {
		name string
		spec corev1.PodSpec
		// want is the pod's GPUs; wantAsks, per container, whether it uses
		// GPUs.
		want     int64
		wantAsks []bool
	}{
		{name: "nvidia.com/gpu", spec: corev1.PodSpec{Containers: []corev1.Container{gpuLimit, uses("logs")}}, want: 8, wantAsks: []bool{true, false}},
		{name: "a GPU claim used by two containers counts once",
			spec: corev1.PodSpec{ResourceClaims: podClaims[:1], Containers: []corev1.Container{uses("a", "gpus"), uses("b", "gpus")}}, want: 4, wantAsks: []bool{true, true}},
		{name: "only GPU claims count",
			spec: corev1.PodSpec{ResourceClaims: podClaims, Containers: []corev1.Container{uses("train", "gpus", "channel"), uses("side", "channel", "unknown"), uses("peer", "shared")}},
			want: 6, wantAsks: []bool{true, false, true}},
		{name: "no GPUs", spec: corev1.PodSpec{ResourceClaims: podClaims[1:2], Containers: []corev1.Container{uses("launcher", "channel")}}, want: 0, wantAsks: []bool{false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := claims.podGPUs(&tc.spec); got != tc.want {
				t.Errorf("podGPUs = %d, want %d", got, tc.want)
			}
			var asks []bool
			for i := range tc.spec.Containers {
				asks = append(asks, claims.containerAsksGPUs(&tc.spec, &tc.spec.Containers[i]))
			}
			if diff := cmp.Diff(tc.wantAsks, asks); diff != "" {
				t.Errorf("containerAsksGPUs (-want,+got):\n%s", diff)
			}
		})
	}
}

// A clique job whose GPUs come through claims is planned a ComputeDomain
// like one asking nvidia.com/gpu, and its GPU containers claim the
// channel; until its claims are read it is not.
func TestPlanComputeDomainDRA(t *testing.T) {
	job := utiltesting.MakeTrainingJob("train", "ml").Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, envtestTemplate(0)).
		Role(v1alpha1.ReplicaWorker, 4, draTemplate("four")).
		Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
	four := claimGPUs{templates: map[string]int64{"four": 4}}
	cases := []struct {
		name   string
		claims claimGPUs
		want   *computeDomainPlan
	}{
		{name: "GPU claims read", claims: four, want: &computeDomainPlan{name: "train-compute-domain", template: "train-channel", numNodes: 4}},
		{name: "a template of no GPUs", claims: claimGPUs{templates: map[string]int64{"four": 0}}},
		{name: "claims not read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, ok := planComputeDomain(job, lockstep.DefaultTopologyConfig(), tc.claims)
			var got *computeDomainPlan
			if ok {
				got = &plan
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(computeDomainPlan{})); diff != "" {
				t.Errorf("planComputeDomain (-want,+got):\n%s", diff)
			}
		})
	}

	spec := draTemplate("four").Spec
	spec.Containers = append(spec.Containers, corev1.Container{Name: "logs"})
	addChannelClaim(&spec, "train-channel", four)
	want := []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptr.To("four")},
		{Name: computeDomainClaim, ResourceClaimTemplateName: ptr.To("train-channel")},
	}
	if diff := cmp.Diff(want, spec.ResourceClaims); diff != "" {
		t.Errorf("pod claims (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.ResourceClaim{{Name: "gpus"}, {Name: computeDomainClaim}}, spec.Containers[0].Resources.Claims); diff != "" {
		t.Errorf("GPU container's claims (-want,+got):\n%s", diff)
	}
	if got := spec.Containers[1].Resources.Claims; len(got) > 0 {
		t.Errorf("the sidecar claims %v, want none", got)
	}
}

// A clique job whose claim template, or claim named directly, does not
// exist yet is held, neither failed nor given pods, with a condition
// naming it; once it exists the job is sized from it (here: it needs a
// ComputeDomain of four nodes, and the cluster serves no ComputeDomain
// API).
//
// Its creation, not a timer, wakes the held job (watchClaimTemplates; see
// TestEnvtestGPUClaims and TestJobsNamingClaims): the held job is not
// polled.
func TestClaimTemplateMissingHoldsNVLinkJob(t *testing.T) {
	named := func(claim string) corev1.PodTemplateSpec {
		tpl := envtestTemplate(0)
		tpl.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(claim)}}
		tpl.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		return tpl
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "four", Namespace: "ml"},
		Spec: utiltesting.MakeGPUClaimTemplate("", "", 4).Spec.Spec}
	cases := []struct {
		name    string
		tpl     corev1.PodTemplateSpec
		missing string
		created client.Object
	}{
		{name: "template", tpl: draTemplate("four"), missing: "ResourceClaimTemplate ml/four", created: utiltesting.MakeGPUClaimTemplate("four", "ml", 4)},
		{name: "claim", tpl: named("four"), missing: "ResourceClaim ml/four", created: claim},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			job := utiltesting.MakeTrainingJob("train", "ml").Framework(v1alpha1.FrameworkPyTorch).UID("uid").
				Role(v1alpha1.ReplicaMaster, 1, tc.tpl).
				Role(v1alpha1.ReplicaWorker, 3, tc.tpl).
				Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
			c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(job).Build()
			r := fakeReconciler(c)
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "train"}}

			// polled: what the job waits for wakes it when created, so
			// only the ComputeDomain API is polled for.
			check := func(reason string, wantMessage string, polled bool) {
				t.Helper()
				res, err := r.Reconcile(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if got := res.RequeueAfter > 0 && res.RequeueAfter <= computeDomainRetry; got != polled {
					t.Errorf("RequeueAfter = %v, want a look again within %v: %t", res.RequeueAfter, computeDomainRetry, polled)
				}
				var got v1alpha1.TrainingJob
				if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
					t.Fatal(err)
				}
				cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
					t.Fatalf("ComputeDomainReady %+v, want False %s", cond, reason)
				}
				if wantMessage != "" && cond.Message != wantMessage {
					t.Errorf("message %q, want %q", cond.Message, wantMessage)
				}
				if meta.IsStatusConditionTrue(got.Status.Conditions, string(v1alpha1.JobFailed)) {
					t.Error("the job failed")
				}
				var pods corev1.PodList
				if err := c.List(ctx, &pods); err != nil || len(pods.Items) > 0 {
					t.Errorf("%d pods (err %v), want none while held", len(pods.Items), err)
				}
			}
			check(ReasonGPUClaimsUnknown, "the pods name "+tc.missing+", which does not exist: whether they ask for GPUs, and so the ComputeDomain the job needs, is unknown; no pods are created until it exists", false)

			if err := c.Create(ctx, tc.created); err != nil {
				t.Fatal(err)
			}
			check(ReasonComputeDomainAPIMissing, "", true)
		})
	}
}

// A job whose GPUs come through claims has a PodGroup whose minResources
// ask for no nvidia.com/gpu: DRA nodes do not advertise it, and upstream's
// minResources check would find no room for the gang.
func TestPodGroupOfDRAJobAsksNoExtendedGPUs(t *testing.T) {
	job := utiltesting.MakeTrainingJob("train", "ml").Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, draTemplate("four")).Role(v1alpha1.ReplicaWorker, 3, draTemplate("four")).DefaultedObj()
	r := fakeReconciler(fake.NewClientBuilder().WithScheme(fakeScheme(t)).Build())
	a, err := r.Registry.For(job.Spec.Framework)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := desiredPodGroup(job, a, r.Topology)
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := pg.Spec.MinResources[lockstep.GPUResource]; ok {
		t.Errorf("minResources asks for %s %s, want none", q.String(), lockstep.GPUResource)
	}
	if pg.Spec.MinMember != 4 {
		t.Errorf("minMember %d, want 4", pg.Spec.MinMember)
	}
}

// A template or claim maps to the jobs of its namespace whose pod
// templates name it as such, each once: a claim does not wake the jobs
// naming a template of its name, nor the other way round.
func TestJobsNamingClaims(t *testing.T) {
	named := func(claim string) corev1.PodTemplateSpec {
		tpl := envtestTemplate(0)
		tpl.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(claim)}}
		return tpl
	}
	job := func(ns, name string, tpl corev1.PodTemplateSpec) *v1alpha1.TrainingJob {
		return utiltesting.MakeTrainingJob(name, ns).Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, 3, tpl).Obj()
	}
	b := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(
		job("ml", "by-claim", named("shared")), job("ml", "by-claim-too", named("shared")),
		job("ml", "by-template", draTemplate("shared")), job("other", "elsewhere", named("shared")),
		job("ml", "unrelated", named("mine")),
	)
	for field, index := range claimIndexes {
		b = b.WithIndex(&v1alpha1.TrainingJob{}, field, index)
	}
	r := fakeReconciler(b.Build())
	names := func(field string, o client.Object) []string {
		var got []string
		for _, req := range r.jobsNaming(field)(context.Background(), o) {
			got = append(got, req.String())
		}
		slices.Sort(got)
		return got
	}
	shared := metav1.ObjectMeta{Name: "shared", Namespace: "ml"}
	if diff := cmp.Diff([]string{"ml/by-claim", "ml/by-claim-too"}, names(jobClaimField, &resourcev1.ResourceClaim{ObjectMeta: shared})); diff != "" {
		t.Errorf("jobs naming claim ml/shared (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ml/by-template"}, names(jobClaimTemplateField, &resourcev1.ResourceClaimTemplate{ObjectMeta: shared})); diff != "" {
		t.Errorf("jobs naming template ml/shared (-want,+got):\n%s", diff)
	}
}
