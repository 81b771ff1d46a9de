package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
)

// TestEnvtestGPUClaims runs a DRA job's GPU claim templates through their
// paths, in order: the user's template is missing (the job is held without
// pods, the condition names the field), then created (the job's copy is
// made before the pods, which claim from it), deleted under the job (made
// again); a job that opted out claims from the template as written.
func TestEnvtestGPUClaims(t *testing.T) {
	ns := envtestNamespace(t)
	ctx := context.Background()
	job := createJob(t, pyTorchJob(ns, "dra", withClaims("four")))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	copyKey := client.ObjectKey{Namespace: ns, Name: "dra-four-one-root"}

	t.Run("held while the template is missing", func(t *testing.T) {
		j := waitForJob(t, job, "held for its claim template", gpuClaimReason(ReasonGPUClaimTemplateMissing))
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady)
		if want := "spec.replicaSpecs[Master].template.spec.resourceClaims[0].resourceClaimTemplateName"; c.Status != "False" || !strings.Contains(c.Message, want) {
			t.Errorf("condition %+v, want False naming %s", c, want)
		}
		waitForEvent(t, job, ReasonGPUClaimTemplateMissing)
		if pods, err := jobPods(ctx, job); err != nil || len(pods) > 0 {
			t.Errorf("pods %v (err %v), want none while the job is held", podNames(pods), err)
		}
	})

	src := claimTemplate(ns, "four", gpuClaimRequest(4))
	src.UID = ""
	if err := harness.api.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	var first types.UID
	t.Run("the copy is made before the pods, which claim from it", func(t *testing.T) {
		pods := waitForPods(t, job, names, nil)
		var c resourcev1.ResourceClaimTemplate
		if err := harness.api.Get(ctx, copyKey, &c); err != nil {
			t.Fatal(err)
		}
		first = c.UID
		checkControlledByJob(t, &c, job)
		want, _ := gpuclaim.OneRootFirst(src.Spec.Spec)
		if diff := cmp.Diff(want, c.Spec.Spec); diff != "" {
			t.Errorf("copy's claim spec (-want,+got):\n%s", diff)
		}
		for _, p := range pods {
			if c.CreationTimestamp.After(p.CreationTimestamp.Time) {
				t.Errorf("pod %s created at %v, before its claim template (%v)", p.Name, p.CreationTimestamp, c.CreationTimestamp)
			}
			want := []corev1.PodResourceClaim{{Name: "four", ResourceClaimTemplateName: ptr.To(copyKey.Name)}}
			if diff := cmp.Diff(want, p.Spec.ResourceClaims); diff != "" {
				t.Errorf("pod %s resourceClaims (-want,+got):\n%s", p.Name, diff)
			}
		}
		waitForJob(t, job, "GPUClaimTemplatesReady", gpuClaimReason(ReasonGPUClaimTemplatesReady))
	})

	t.Run("made again when deleted under the job", func(t *testing.T) {
		c := &resourcev1.ResourceClaimTemplate{}
		c.Namespace, c.Name = copyKey.Namespace, copyKey.Name
		if err := harness.api.Delete(ctx, c); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a new copy", func(ctx context.Context) (bool, string, error) {
			var got resourcev1.ResourceClaimTemplate
			err := harness.api.Get(ctx, copyKey, &got)
			if apierrors.IsNotFound(err) {
				return false, "not found", nil
			}
			return err == nil && got.UID != first, string(got.UID), err
		})
	})

	t.Run("opted out", func(t *testing.T) {
		out := createJob(t, pyTorchJob(ns, "dra-out", withClaims("four"), func(j *v1alpha1.TrainingJob) {
			j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "host", GPUClaims: v1alpha1.GPUClaimsAsWritten}
		}))
		pods := waitForPods(t, out, gangNames(out.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3}), nil)
		for _, p := range pods {
			want := []corev1.PodResourceClaim{{Name: "four", ResourceClaimTemplateName: ptr.To("four")}}
			if diff := cmp.Diff(want, p.Spec.ResourceClaims); diff != "" {
				t.Errorf("pod %s resourceClaims (-want,+got):\n%s", p.Name, diff)
			}
		}
		err := harness.api.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dra-out-four-one-root"}, &resourcev1.ResourceClaimTemplate{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the opted-out job's copy: err %v, want NotFound", err)
		}
		j, err := getJob(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady); c != nil {
			t.Errorf("condition %+v, want none", c)
		}
	})
}

// A clique job whose pods name a ResourceClaim that does not exist yet is
// held (GPUClaimsUnknown), and the claim's creation wakes it: the job is
// not polled, the controller is idle when the claim comes, and without the
// claim watch the job stayed held.
func TestEnvtestNamedClaimWakesHeldJob(t *testing.T) {
	ns := envtestNamespace(t)
	ctx := context.Background()
	job := createJob(t, pyTorchJob(ns, "named", func(j *v1alpha1.TrainingJob) {
		j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "clique", Mode: v1alpha1.TopologyRequired}
		for role, rs := range j.Spec.ReplicaSpecs {
			rs.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("shared")}}
			rs.Template.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
			j.Spec.ReplicaSpecs[role] = rs
		}
	}))
	waitForJob(t, job, "held for its claim", computeDomainReason(ReasonGPUClaimsUnknown))

	waitForIdleController(t)
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: claimTemplate(ns, "shared", gpuClaimRequest(4)).Spec.Spec}
	if err := harness.api.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	waitForJob(t, job, "no longer held for its claim", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
		return c != nil && c.Reason != ReasonGPUClaimsUnknown
	})
}

// gpuClaimReason is a job whose GPUClaimTemplatesReady condition has reason.
func gpuClaimReason(reason string) func(*v1alpha1.TrainingJob) bool {
	return func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionGPUClaimTemplatesReady)
		return c != nil && c.Reason == reason
	}
}
