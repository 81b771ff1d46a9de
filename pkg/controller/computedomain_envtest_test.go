package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	lsenvtest "github.com/lockstep-dev/lockstep/pkg/util/envtest"
)

// TestEnvtestComputeDomain runs a multi-node NVLink job's ComputeDomain
// through its paths, in order: the API is missing first (the job is held
// without pods), then installed (the domain is created before the pods,
// which claim its channel), reported ready, deleted under the job
// (created again), kept across a gang restart; a job that opted out gets
// none, and a foreign domain in the way holds a job. The envtest
// apiserver runs no garbage collector: deletion with the job is the owner
// reference, checked here and exercised by the e2e test.
func TestEnvtestComputeDomain(t *testing.T) {
	ns := envtestNamespace(t)
	ctx := context.Background()
	clique := func(j *v1alpha1.TrainingJob) {
		j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "clique", Mode: v1alpha1.TopologyRequired}
	}
	job := createJob(t, pyTorchJob(ns, "nvl", clique))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})

	t.Run("held while the API is missing", func(t *testing.T) {
		if harness.cdAPI {
			t.Skip("the ComputeDomain CRD was installed by an earlier run of this test")
		}
		j := waitForJob(t, job, "held for the ComputeDomain API", computeDomainReason(ReasonComputeDomainAPIMissing))
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
		if c.Status != metav1.ConditionFalse {
			t.Errorf("condition %+v, want False", c)
		}
		waitForEvent(t, job, ReasonComputeDomainAPIMissing)
		if pods, err := jobPods(ctx, job); err != nil || len(pods) > 0 {
			t.Errorf("pods %v (err %v), want none while the job is held", podNames(pods), err)
		}
	})

	installComputeDomainCRD(t)
	var first types.UID
	t.Run("created before the pods, which claim its channel", func(t *testing.T) {
		pods := waitForPods(t, job, names, nil)
		cd := getComputeDomain(t, ns, "nvl-compute-domain")
		first = cd.UID
		for _, p := range pods {
			if cd.CreationTimestamp.After(p.CreationTimestamp.Time) {
				t.Errorf("pod %s created at %v, before its ComputeDomain (%v)", p.Name, p.CreationTimestamp, cd.CreationTimestamp)
			}
		}
		wantSpec := computedomain.Spec{NumNodes: 4, Channel: &computedomain.ChannelSpec{
			ResourceClaimTemplate: computedomain.ResourceClaimTemplateRef{Name: "nvl-channel"}, AllocationMode: computedomain.AllocationModeSingle}}
		if diff := cmp.Diff(wantSpec, cd.Spec); diff != "" {
			t.Errorf("ComputeDomain spec (-want,+got):\n%s", diff)
		}
		if !metav1.IsControlledBy(cd, job) {
			t.Errorf("ComputeDomain owners %+v, want the job as controller", cd.OwnerReferences)
		}
		for _, p := range pods {
			want := []corev1.PodResourceClaim{{Name: computeDomainClaim, ResourceClaimTemplateName: ptr.To("nvl-channel")}}
			if diff := cmp.Diff(want, p.Spec.ResourceClaims); diff != "" {
				t.Errorf("pod %s resourceClaims (-want,+got):\n%s", p.Name, diff)
			}
			if got := p.Spec.Containers[0].Resources.Claims; !slices.Contains(got, corev1.ResourceClaim{Name: computeDomainClaim}) {
				t.Errorf("pod %s container claims %v, want %s", p.Name, got, computeDomainClaim)
			}
		}
		waitForJob(t, job, "ComputeDomainNotReady", computeDomainReason(ReasonComputeDomainNotReady))
	})

	t.Run("ready as the driver reports it", func(t *testing.T) {
		u := computedomain.NewObject()
		if err := harness.api.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nvl-compute-domain"}, u); err != nil {
			t.Fatal(err)
		}
		var nodes []any
		for i := range 4 {
			nodes = append(nodes, map[string]any{"name": fmt.Sprintf("tray-%d", i), "ipAddress": "", "cliqueID": "c1", "index": int64(i), "status": "Ready"})
		}
		if err := unstructured.SetNestedField(u.Object, map[string]any{"status": "Ready", "nodes": nodes}, "status"); err != nil {
			t.Fatal(err)
		}
		if err := harness.api.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
		waitForJob(t, job, "ComputeDomainReady", conditionIs(v1alpha1.JobState(v1alpha1.ConditionComputeDomainReady), metav1.ConditionTrue))
	})

	t.Run("created again when deleted under the job", func(t *testing.T) {
		u := computedomain.NewObject()
		u.SetNamespace(ns)
		u.SetName("nvl-compute-domain")
		if err := harness.api.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a new ComputeDomain", func(ctx context.Context) (bool, string, error) {
			cd, err := readComputeDomain(ctx, ns, "nvl-compute-domain")
			if apierrors.IsNotFound(err) {
				return false, "none", nil
			}
			if err != nil {
				return false, "", err
			}
			return cd.UID != first, "uid " + string(cd.UID), nil
		})
		waitForJob(t, job, "ComputeDomainNotReady again", computeDomainReason(ReasonComputeDomainNotReady))
	})

	t.Run("kept across a gang restart", func(t *testing.T) {
		kept := getComputeDomain(t, ns, "nvl-compute-domain").UID
		pods := waitForPods(t, job, names, nil)
		before := map[string]types.UID{}
		for _, p := range pods {
			before[p.Name] = p.UID
		}
		setPodPhase(t, ns, names[0], corev1.PodFailed, 1)
		waitForJob(t, job, "a restart", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount == 1 })
		waitForPods(t, job, names, before, names...)
		if got := getComputeDomain(t, ns, "nvl-compute-domain").UID; got != kept {
			t.Errorf("ComputeDomain uid %s after the restart, want %s kept", got, kept)
		}
	})

	t.Run("opted out", func(t *testing.T) {
		out := createJob(t, pyTorchJob(ns, "nvl-out", clique, func(j *v1alpha1.TrainingJob) {
			j.Spec.Topology.ComputeDomain = v1alpha1.ComputeDomainDisabled
		}))
		pods := waitForPods(t, out, gangNames(out.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3}), nil)
		for _, p := range pods {
			if len(p.Spec.ResourceClaims) > 0 {
				t.Errorf("pod %s claims %v, want none", p.Name, p.Spec.ResourceClaims)
			}
		}
		if _, err := readComputeDomain(ctx, ns, "nvl-out-compute-domain"); !apierrors.IsNotFound(err) {
			t.Errorf("ComputeDomain of the opted-out job: err %v, want not found", err)
		}
		j, err := getJob(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady); c != nil {
			t.Errorf("condition %+v, want none", c)
		}
	})

	t.Run("a foreign ComputeDomain in the way holds the job", func(t *testing.T) {
		foreign := &computedomain.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-compute-domain"},
			Spec: computedomain.Spec{NumNodes: 2, Channel: &computedomain.ChannelSpec{ResourceClaimTemplate: computedomain.ResourceClaimTemplateRef{Name: "other"}}}}
		u, err := computedomain.ToUnstructured(foreign)
		if err != nil {
			t.Fatal(err)
		}
		if err := harness.api.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		taken := createJob(t, pyTorchJob(ns, "taken", clique))
		waitForJob(t, taken, "ComputeDomainConflict", computeDomainReason(ReasonComputeDomainConflict))
		if pods, err := jobPods(ctx, taken); err != nil || len(pods) > 0 {
			t.Errorf("pods %v (err %v), want none while the job is held", podNames(pods), err)
		}
	})
}

// computeDomainReason is a job whose ComputeDomainReady condition has reason.
func computeDomainReason(reason string) func(*v1alpha1.TrainingJob) bool {
	return func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
		return c != nil && c.Reason == reason
	}
}

// installComputeDomainCRD installs the fake world's ComputeDomain CRD into
// the shared apiserver, once.
func installComputeDomainCRD(t *testing.T) {
	t.Helper()
	if harness.cdAPI {
		return
	}
	root, err := lsenvtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(harness.cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(root, "deploy", "third-party", "nvidia-dra-driver-gpu", "computedomains.yaml")},
	}); err != nil {
		t.Fatalf("installing the ComputeDomain CRD: %v", err)
	}
	harness.cdAPI = true
}

func readComputeDomain(ctx context.Context, ns, name string) (*computedomain.ComputeDomain, error) {
	u := computedomain.NewObject()
	if err := harness.api.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return nil, err
	}
	return computedomain.FromUnstructured(u)
}

func getComputeDomain(t *testing.T, ns, name string) *computedomain.ComputeDomain {
	t.Helper()
	cd, err := readComputeDomain(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("ComputeDomain %s/%s: %v", ns, name, err)
	}
	return cd
}
