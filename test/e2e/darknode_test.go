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
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// nodeUnreachable says whether the node lifecycle controller has marked a
// node unreachable: Ready Unknown and the unreachable NoExecute taint.
func nodeUnreachable(n *corev1.Node) bool {
	c := findNodeCondition(n, corev1.NodeReady)
	if c == nil || c.Status != corev1.ConditionUnknown {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

func findNodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// darkenUntilCleanup darkens node (framework's DarkenNode) and, when the
// test ends, hands it back to KWOK and waits until every node is Ready
// again, for the tests after it.
func darkenUntilCleanup(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		if err := cluster.RestoreNode(ctx, node); err != nil {
			t.Error(err)
			return
		}
		if err := cluster.WaitNodesReady(ctx, 3*time.Minute); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.DarkenNode(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// tolerationSeconds is a pod's tolerationSeconds of a NoExecute taint key;
// false when it has no such toleration.
func tolerationSeconds(p *corev1.Pod, key string) (int64, bool) {
	for _, t := range p.Spec.Tolerations {
		if t.Key == key && t.Effect == corev1.TaintEffectNoExecute && t.TolerationSeconds != nil {
			return *t.TolerationSeconds, true
		}
	}
	return 0, false
}

// TestGangRestartsWhenANodeGoesDark takes one node of a running gang away
// from KWOK (DarkenNode): no heartbeat, no status, pods there never
// confirmed deleted. With upstream's node lifecycle defaults and the job's
// default runPolicy.unreachableToleranceSeconds, the real
// kube-controller-manager marks the node Unknown and taints it, the
// controller restarts the gang exactly once with reason NodeUnreachable
// naming the node, force-deletes the member stuck on it, and the gang runs
// again whole on healthy nodes with no GPU given twice. A bystander pod on
// the same node, deleted the plain way, stays Terminating: the harness is
// as harsh as a real dead node. The log line "dark node: ..." is the
// measured path.
func TestGangRestartsWhenANodeGoesDark(t *testing.T) {
	if !cluster.Local() {
		t.Skip("darkens a KWOK node through its Lease: needs the local cluster")
	}
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "dark", 3)
	for role, spec := range job.Spec.ReplicaSpecs {
		// One member per node, and the pods' default grace period: with
		// pytorchJob's 0, a plain delete removes a bound pod at once and a
		// dark node would cost nothing.
		spec.Template.Spec.TerminationGracePeriodSeconds = nil
		spec.Template.Spec.Containers[0].Resources.Limits[lockstep.GPUResource] = resource.MustParse("8")
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)
	first := waitPods(t, ns, job.Name, 4, 60*time.Second)
	waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	short := watchRunningShort(t, ns, job.Name, 4)
	victim := first["dark-worker-1"]
	dark := victim.Spec.NodeName
	// The pods tolerate the dark node for the job's bound, not the
	// cluster's 300 s default, so the taint manager agrees with it.
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		if s, ok := tolerationSeconds(&victim, key); !ok || s != int64(v1alpha1.DefaultUnreachableToleranceSeconds) {
			t.Errorf("pod %s tolerates %s for %d s (found %v), want %d", victim.Name, key, s, ok, v1alpha1.DefaultUnreachableToleranceSeconds)
		}
	}

	// A bystander on the same node, with the cluster's defaults and a 1 s
	// grace period.
	bystander := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bystander", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      dark,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "idle", Image: "registry.example/idle:latest"}},
		},
	}
	cluster.CreatePods(t, bystander)
	err := localcluster.Poll(ctx, 100*time.Millisecond, 30*time.Second, "bystander Running", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, bystander.Name, metav1.GetOptions{})
		if err == nil {
			bystander = p
		}
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := tolerationSeconds(bystander, corev1.TaintNodeUnreachable); !ok || s != 300 {
		t.Errorf("bystander tolerates %s for %d s (found %v), want DefaultTolerationSeconds' 300", corev1.TaintNodeUnreachable, s, ok)
	}

	darkened := time.Now()
	darkenUntilCleanup(t, dark)
	var unreachableAt time.Time
	err = localcluster.Poll(ctx, 250*time.Millisecond, 3*time.Minute, "node "+dark+" Unknown with the unreachable NoExecute taint", func(ctx context.Context) (bool, error) {
		n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, dark, metav1.GetOptions{})
		if err != nil || !nodeUnreachable(n) {
			return false, nil
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == corev1.TaintNodeUnreachable && tn.Effect == corev1.TaintEffectNoExecute && tn.TimeAdded != nil {
				unreachableAt = tn.TimeAdded.Time
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A plain delete: nobody will ever confirm it.
	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, bystander.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	waitJob(t, ns, job.Name, 2*time.Minute, "restartCount 1", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	restartedAt := time.Now()
	second := waitGangReplaced(t, ns, job.Name, 4, first, "1")
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running again", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
	})
	whole := time.Now()
	t.Logf("dark node: node-monitor-grace-period 50s, unreachableToleranceSeconds %d; darkened → unreachable taint %s, → restart seen %s, → gang running whole %s",
		v1alpha1.DefaultUnreachableToleranceSeconds, unreachableAt.Sub(darkened).Round(time.Second),
		restartedAt.Sub(darkened).Round(100*time.Millisecond), whole.Sub(darkened).Round(100*time.Millisecond))

	if final.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d after one dark node, want exactly 1", final.Status.RestartCount)
	}
	c := meta.FindStatusCondition(final.Status.Conditions, string(v1alpha1.JobRestarting))
	if c == nil || !strings.Contains(c.Message, controller.ReasonNodeUnreachable) || !strings.Contains(c.Message, dark) {
		t.Errorf("Restarting condition %+v, want it to say %s and name node %s", c, controller.ReasonNodeUnreachable, dark)
	}
	events, err := cluster.Events(ctx, ns, "TrainingJob", job.Name)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, e := range events {
		if e.Reason == controller.ReasonNodeUnreachable && strings.Contains(e.Message, dark) {
			named = true
		}
	}
	if !named {
		t.Errorf("no %s event naming node %s on the job: %v", controller.ReasonNodeUnreachable, dark, events)
	}
	for _, p := range second {
		if p.Spec.NodeName == dark {
			t.Errorf("pod %s of the restarted gang was placed on the dark node %s", p.Name, dark)
		}
	}
	// Every pod of the first gang is gone, the one stuck on the dark node
	// included: the controller force-deleted it.
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Errorf("%d pods of the job, want the 4 of the new gang", len(list.Items))
	}
	for _, p := range list.Items {
		if first[p.Name].UID == p.UID {
			t.Errorf("pod %s of the first gang (node %s) still exists, deleting since %v", p.Name, p.Spec.NodeName, p.DeletionTimestamp)
		}
	}
	// The node is still dark: the gang did not wait for it.
	n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, dark, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeUnreachable(n) {
		t.Errorf("node %s is no longer unreachable; the test proves nothing", dark)
	}
	// The bystander's grace period ran out long ago (the restart alone
	// waits the job's 30 s): nobody confirmed its deletion, as on a real
	// dead node; the controller force-deletes only its own pods.
	p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, bystander.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("bystander on the dark node: %v, want it stuck Terminating", err)
	case p.DeletionTimestamp == nil || !p.DeletionTimestamp.Time.Before(time.Now()):
		t.Errorf("bystander deletion timestamp %v, want one in the past", p.DeletionTimestamp)
	}
	checkGPUs(t)
	short.check(t)
}
