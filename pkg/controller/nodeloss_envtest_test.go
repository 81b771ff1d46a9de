package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// envtestNode creates a Ready node, as a kubelet registers one.
func envtestNode(t *testing.T, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := harness.api.Create(context.Background(), n); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	setNodeHealth(t, name, corev1.ConditionTrue, nil)
}

// setNodeHealth sets a node's Ready status and its lifecycle taints, as the
// node lifecycle controller does when the kubelet reports NotReady (False,
// not-ready taint) or stops reporting (Unknown, unreachable taint).
func setNodeHealth(t *testing.T, name string, ready corev1.ConditionStatus, taint *corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	var n corev1.Node
	if err := harness.api.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := harness.api.Status().Update(ctx, &n); err != nil {
		t.Fatalf("setting node %s %s: %v", name, ready, err)
	}
	if taint == nil {
		return
	}
	if err := harness.api.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, *taint)
	if err := harness.api.Update(ctx, &n); err != nil {
		t.Fatalf("tainting node %s: %v", name, err)
	}
}

// darkGang runs a gang of bound pods with a real grace period, one per node,
// with runPolicy.unreachableToleranceSeconds bound and
// unreachableForceDeleteSeconds forceDelete.
func darkGang(t *testing.T, name string, bound, forceDelete int32) (*v1alpha1.TrainingJob, []corev1.Pod, []string) {
	t.Helper()
	ns := envtestNamespace(t)
	job := createJob(t, pyTorchJob(ns, name, func(j *v1alpha1.TrainingJob) {
		runPolicy(j).UnreachableToleranceSeconds = ptr.To(bound)
		runPolicy(j).UnreachableForceDeleteSeconds = ptr.To(forceDelete)
		for role, s := range j.Spec.ReplicaSpecs {
			s.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			j.Spec.ReplicaSpecs[role] = s
		}
	}))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	pods := waitForPods(t, job, names, nil)
	nodes := make([]string, len(pods))
	for i := range pods {
		nodes[i] = fmt.Sprintf("%s-node-%d", ns, i)
		envtestNode(t, nodes[i])
		bindPod(t, &pods[i], nodes[i])
	}
	runGang(t, job, pods)
	return job, pods, nodes
}

// podState is a pod by UID: "gone", "terminating" or "live".
func podState(ctx context.Context, p corev1.Pod) (string, error) {
	var now corev1.Pod
	err := harness.api.Get(ctx, client.ObjectKeyFromObject(&p), &now)
	switch {
	case apierrors.IsNotFound(err) || err == nil && now.UID != p.UID:
		return "gone", nil
	case err != nil:
		return "", err
	case now.DeletionTimestamp != nil:
		return "terminating", nil
	}
	return "live", nil
}

// A bound of 0 restarts the gang as soon as a node's kubelet stops posting
// status: once, an infrastructure restart with reason NodeUnreachable
// naming the node and the member. The member there is deleted but not
// force-deleted (the node may only be cut off and still run it), and the
// new incarnation, named apart, is created while it stays Terminating, as
// soon as the kubelets of the healthy nodes confirm theirs. Tainting the
// node out-of-service is the proof that it runs nothing: the member is
// force-deleted then.
func TestEnvtestDarkNodeRestartsBesideTheStuckMember(t *testing.T) {
	ctx := context.Background()
	job, pods, nodes := darkGang(t, "dark", 0, v1alpha1.DefaultUnreachableForceDeleteSeconds)
	setNodeHealth(t, nodes[1], corev1.ConditionUnknown, &corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	j := waitForJob(t, job, "a restart", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting))
	if c == nil || c.Reason != ReasonNodeUnreachable || !strings.Contains(c.Message, nodes[1]) || !strings.Contains(c.Message, pods[1].Name) {
		t.Errorf("Restarting condition %+v, want reason %s naming %s and %s", c, ReasonNodeUnreachable, nodes[1], pods[1].Name)
	}
	want := []v1alpha1.RestartRecord{{RestartCount: 1, Kind: v1alpha1.RestartInfrastructure, Reason: ReasonNodeUnreachable}}
	got := slices.Clone(j.Status.Restarts)
	for i := range got {
		got[i].Time = metav1.Time{}
	}
	if diff := cmp.Diff(want, got); diff != "" || j.Status.InfrastructureRestarts != 1 {
		t.Errorf("infrastructureRestarts %d, restarts (-want,+got):\n%s", j.Status.InfrastructureRestarts, diff)
	}
	eventually(t, "the old gang terminating", func(ctx context.Context) (bool, string, error) {
		s, err := podState(ctx, pods[2])
		return s == "terminating", s, err
	})
	// The kubelets of the healthy nodes confirm; the silent node's does not.
	for _, i := range []int{0, 2, 3} {
		if err := harness.api.Delete(ctx, &pods[i], client.GracePeriodSeconds(0), client.Preconditions{UID: &pods[i].UID}); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, len(pods))
	for i := range pods {
		names[i] = slotName(&pods[i])
	}
	next := waitForPods(t, job, names, podUIDs(pods), names...)
	for _, p := range next {
		if p.Labels[lockstep.LabelIncarnation] != "1" || !strings.Contains(p.Name, "-r1-") {
			t.Errorf("pod %s (incarnation %s) of the new gang is not named for incarnation 1", p.Name, p.Labels[lockstep.LabelIncarnation])
		}
	}
	if s, err := podState(ctx, pods[1]); err != nil || s != "terminating" {
		t.Fatalf("member on the silent node: %s (%v), want terminating: nothing proves it stopped", s, err)
	}
	// An operator fences the node: now it is force-deleted.
	setNodeHealth(t, nodes[1], corev1.ConditionUnknown, &corev1.Taint{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute})
	eventually(t, "the member on the fenced node force-deleted", func(ctx context.Context) (bool, string, error) {
		s, err := podState(ctx, pods[1])
		return s == "gone", s, err
	})
	j, err := getJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.RestartCount != 1 {
		t.Errorf("restartCount %d after one node lost, want 1", j.Status.RestartCount)
	}
}

// Under the bound nothing restarts; the controller requeues itself for the
// rest of the bound (no other event comes) and then restarts the gang; the
// member on the unreachable node is force-deleted once
// unreachableForceDeleteSeconds (here 2) have passed, again by a requeue
// of its own. The pods tolerate the unreachable taint for the bound and
// the not-ready one for at least the cluster's 300 s.
func TestEnvtestDarkNodeWaitsForTheBound(t *testing.T) {
	const bound = 3
	job, pods, nodes := darkGang(t, "bound", bound, 2)
	for key, want := range map[string]int64{corev1.TaintNodeUnreachable: bound, corev1.TaintNodeNotReady: int64(v1alpha1.NotReadyToleranceSeconds)} {
		found := false
		for _, tol := range pods[0].Spec.Tolerations {
			if tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil && *tol.TolerationSeconds == want {
				found = true
			}
		}
		if !found {
			t.Errorf("pod %s lacks the %s:NoExecute toleration of %d s: %+v", pods[0].Name, key, want, pods[0].Spec.Tolerations)
		}
	}
	marked := time.Now().Truncate(time.Second)
	begin := time.Now()
	setNodeHealth(t, nodes[3], corev1.ConditionUnknown, &corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	var n corev1.Node
	if err := harness.api.Get(context.Background(), client.ObjectKey{Name: nodes[3]}, &n); err != nil {
		t.Fatal(err)
	}
	if ta := n.Spec.Taints[0].TimeAdded; ta != nil {
		marked = ta.Time
	}

	j := waitForJob(t, job, "a restart", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	if waited := time.Since(begin); waited < (bound-1)*time.Second {
		t.Errorf("restarted %s after the node was marked, before the bound of %d s", waited, bound)
	}
	c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting))
	if c == nil || c.Reason != ReasonNodeUnreachable || !strings.Contains(c.Message, nodes[3]) {
		t.Fatalf("Restarting condition %+v, want reason %s naming %s", c, ReasonNodeUnreachable, nodes[3])
	}
	// Conditions have second precision; the taint's stamp too.
	if early := marked.Add(bound * time.Second).Sub(c.LastTransitionTime.Time); early > time.Second {
		t.Errorf("restarted %s before the bound of %d s ran out (taint at %s, restart at %s)", early, bound, marked, c.LastTransitionTime)
	}
	eventually(t, "the member on the unreachable node force-deleted", func(ctx context.Context) (bool, string, error) {
		s, err := podState(ctx, pods[3])
		return s == "gone", s, err
	})
	if j.Status.RestartCount != 1 {
		t.Errorf("restartCount %d, want 1", j.Status.RestartCount)
	}
}
