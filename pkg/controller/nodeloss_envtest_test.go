package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// darkGang runs a gang of bound pods with a real grace period, one per node.
func darkGang(t *testing.T, name string, bound int32) (*v1alpha1.TrainingJob, []corev1.Pod, []string) {
	t.Helper()
	ns := envtestNamespace(t)
	job := createJob(t, pyTorchJob(ns, name, func(j *v1alpha1.TrainingJob) {
		runPolicy(j).UnreachableToleranceSeconds = ptr.To(bound)
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

// A bound of 0 restarts the gang as soon as a node is marked NotReady:
// once, with reason NodeUnreachable naming the node and the member. The
// member on the NotReady node, whose kubelet still answers, is deleted the
// normal way and waits for its kubelet, like the members on healthy nodes;
// the member on a node whose kubelet stops (Unknown) is force-deleted.
func TestEnvtestDarkNodeForceDeletesOnlyUnreachable(t *testing.T) {
	ctx := context.Background()
	job, pods, nodes := darkGang(t, "dark", 0)
	setNodeHealth(t, nodes[1], corev1.ConditionFalse, &corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute})
	j := waitForJob(t, job, "a restart", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobRestarting))
	if c == nil || c.Reason != ReasonNodeUnreachable || !strings.Contains(c.Message, nodes[1]) || !strings.Contains(c.Message, pods[1].Name) {
		t.Errorf("Restarting condition %+v, want reason %s naming %s and %s", c, ReasonNodeUnreachable, nodes[1], pods[1].Name)
	}
	// The restart deleted every member; then a second node's kubelet stops.
	eventually(t, "the old gang terminating", func(ctx context.Context) (bool, string, error) {
		s, err := podState(ctx, pods[2])
		return s == "terminating", s, err
	})
	setNodeHealth(t, nodes[2], corev1.ConditionUnknown, &corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute})
	want := map[string]string{pods[0].Name: "terminating", pods[1].Name: "terminating", pods[2].Name: "gone", pods[3].Name: "terminating"}
	eventually(t, "the unreachable member force-deleted, the others terminating", func(ctx context.Context) (bool, string, error) {
		got := map[string]string{}
		for _, p := range pods {
			s, err := podState(ctx, p)
			if err != nil {
				return false, "", err
			}
			got[p.Name] = s
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got), nil
	})
	// The kubelets of the healthy nodes confirm; each removal wakes the
	// controller, which sees the NotReady node's member still terminating
	// and must leave it to its kubelet.
	for _, i := range []int{0, 3} {
		if err := harness.api.Delete(ctx, &pods[i], client.GracePeriodSeconds(0), client.Preconditions{UID: &pods[i].UID}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the healthy members removed", func(ctx context.Context) (bool, string, error) {
		var list corev1.PodList
		err := harness.api.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{lockstep.LabelJobName: job.Name})
		return err == nil && len(list.Items) == 1, fmt.Sprintf("%d pods", len(list.Items)), err
	})
	if s, err := podState(ctx, pods[1]); err != nil || s != "terminating" {
		t.Fatalf("member on the NotReady node: %s (%v), want terminating until its kubelet confirms", s, err)
	}
	// Its kubelet confirms: the gang comes back whole, counted once.
	if err := harness.api.Delete(ctx, &pods[1], client.GracePeriodSeconds(0), client.Preconditions{UID: &pods[1].UID}); err != nil {
		t.Fatalf("the NotReady node's kubelet confirming: %v (the controller must not have force-deleted it)", err)
	}
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	waitForPods(t, job, names, podUIDs(pods), names...)
	j, err := getJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.RestartCount != 1 {
		t.Errorf("restartCount %d after two nodes lost at once, want 1", j.Status.RestartCount)
	}
}

// Under the bound nothing restarts; the controller requeues itself for the
// rest of the bound (no other event comes) and then restarts the gang,
// force-deleting the member on the unreachable node. The pods tolerate the
// unreachable and not-ready taints for the bound.
func TestEnvtestDarkNodeWaitsForTheBound(t *testing.T) {
	const bound = 3
	job, pods, nodes := darkGang(t, "bound", bound)
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		found := false
		for _, tol := range pods[0].Spec.Tolerations {
			if tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil && *tol.TolerationSeconds == bound {
				found = true
			}
		}
		if !found {
			t.Errorf("pod %s lacks the %s:NoExecute toleration of %d s: %+v", pods[0].Name, key, bound, pods[0].Spec.Tolerations)
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
