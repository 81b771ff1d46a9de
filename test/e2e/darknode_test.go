package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// confirmed deleted, the containers there, for all anyone knows, still
// running (a partition looks the same). With upstream's node lifecycle
// defaults and the job's default runPolicy.unreachableToleranceSeconds, the
// real kube-controller-manager marks the node Unknown and taints it, and
// the controller restarts the gang exactly once, an infrastructure restart
// (reason NodeUnreachable naming the node) that backoffLimit 0 does not
// count. The new incarnation runs whole on healthy nodes under other pod
// names, with a rendezvous the old ranks cannot reach, while the member on
// the dark node stays Terminating: nothing proves it stopped, so it is not
// force-deleted. Then the node comes back with that pod still "running":
// its kubelet (KWOK) finishes the deletion, and the new gang is untouched.
// A bystander pod on the same node, deleted the plain way, stays
// Terminating while the node is dark: the harness is as harsh as a real
// dead node. The log line "dark node: ..." is the measured path.
func TestGangRestartsWhenANodeGoesDark(t *testing.T) {
	if !cluster.Local() {
		t.Skip("darkens a KWOK node through its Lease: needs the local cluster")
	}
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "dark", 3)
	job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](0)
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
	// The master reports a checkpoint, which the next incarnation resumes
	// from; the member about to be cut off keeps its credentials.
	master := first["dark-master-0"]
	if err := reportCheckpoint(ctx, rankClient(t, master), ns, master.Name, 500, time.Now(), "s3://ckpt/dark/500"); err != nil {
		t.Fatalf("master reporting a checkpoint: %v", err)
	}
	waitCheckpoint(t, ns, job.Name, 500)
	oldRank := rankClient(t, victim)
	// The pods tolerate the dark node for the job's bound, not the
	// cluster's 300 s default, so the taint manager agrees with it; a
	// NotReady node whose kubelet still answers gets the cluster's 300 s.
	for key, want := range map[string]int64{
		corev1.TaintNodeUnreachable: int64(v1alpha1.DefaultUnreachableToleranceSeconds),
		corev1.TaintNodeNotReady:    int64(v1alpha1.NotReadyToleranceSeconds),
	} {
		if s, ok := tolerationSeconds(&victim, key); !ok || s != want {
			t.Errorf("pod %s tolerates %s for %d s (found %v), want %d", victim.Name, key, s, ok, want)
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

	// One restart, the infrastructure's: backoffLimit 0 did not fail the job.
	if final.Status.RestartCount != 1 || final.Status.InfrastructureRestarts != 1 || hasCondition(v1alpha1.JobFailed, "")(final) {
		t.Errorf("restartCount %d, infrastructureRestarts %d, failed %v after one dark node under backoffLimit 0; want 1, 1 and not failed",
			final.Status.RestartCount, final.Status.InfrastructureRestarts, hasCondition(v1alpha1.JobFailed, "")(final))
	}
	if r := final.Status.Restarts; len(r) != 1 || r[0].Kind != v1alpha1.RestartInfrastructure || r[0].Reason != controller.ReasonNodeUnreachable || r[0].RestartCount != 1 {
		t.Errorf("status.restarts %+v, want one Infrastructure restart %s making restartCount 1", r, controller.ReasonNodeUnreachable)
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
	// The new incarnation: other names, its own rendezvous, healthy nodes.
	newMaster := ""
	for _, p := range second {
		if p.Spec.NodeName == dark {
			t.Errorf("pod %s of the restarted gang was placed on the dark node %s", p.Name, dark)
		}
		env := envOf(p)
		if _, old := first[p.Name]; old || env[lockstep.EnvIncarnation] != "1" {
			t.Errorf("pod %s of the new gang: named like the old one (%v) or %s=%q, want a name and variable of incarnation 1",
				p.Name, old, lockstep.EnvIncarnation, env[lockstep.EnvIncarnation])
		}
		newMaster = env["MASTER_ADDR"]
		if env[lockstep.EnvResumeFrom] != "s3://ckpt/dark/500" || env[lockstep.EnvResumeStep] != "500" {
			t.Errorf("pod %s of the new gang resumes from %q at step %q, want the master's report s3://ckpt/dark/500 at 500",
				p.Name, env[lockstep.EnvResumeFrom], env[lockstep.EnvResumeStep])
		}
	}
	// The old member, still running for all anyone knows, cannot report
	// for the new incarnation: it is not among the pods the job's reporter
	// Role names (or its token died with its pod), and its incarnation's
	// reports are not read.
	if err := reportCheckpoint(ctx, oldRank, ns, victim.Name, 600, time.Now(), "s3://ckpt/dark/old-600"); !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		t.Errorf("the old member reporting a checkpoint after the restart: %v, want Forbidden or Unauthorized", err)
	}
	// The old member on the dark node: still there, Terminating, nobody
	// having confirmed or forced it; its environment names incarnation 0
	// and a rendezvous the new gang does not serve.
	stuck, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	switch {
	case err != nil || stuck.UID != victim.UID:
		t.Fatalf("the old member %s on the dark node: %v (uid %v), want it still Terminating: nothing proved it stopped", victim.Name, err, stuck.GetUID())
	case stuck.DeletionTimestamp == nil:
		t.Errorf("the old member %s on the dark node is not being deleted", victim.Name)
	}
	oldEnv := envOf(*stuck)
	if oldEnv[lockstep.EnvIncarnation] != "0" || oldEnv["MASTER_ADDR"] == newMaster || newMaster == "" {
		t.Errorf("old member: %s=%q, MASTER_ADDR %q; the new gang's MASTER_ADDR %q: want incarnation 0 and another rendezvous",
			lockstep.EnvIncarnation, oldEnv[lockstep.EnvIncarnation], oldEnv["MASTER_ADDR"], newMaster)
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
	// dead node.
	p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, bystander.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("bystander on the dark node: %v, want it stuck Terminating", err)
	case p.DeletionTimestamp == nil || !p.DeletionTimestamp.Time.Before(time.Now()):
		t.Errorf("bystander deletion timestamp %v, want one in the past", p.DeletionTimestamp)
	}
	checkGPUs(t)

	// The node comes back, the old member's container "still running":
	// its kubelet sees the pod deleted and finishes it. The new gang runs
	// on untouched, and nothing is counted again.
	if err := cluster.RestoreNode(ctx, dark); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 250*time.Millisecond, 3*time.Minute, "the old member on the returned node cleaned up", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.UID != victim.UID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	if c := after.Status.Checkpoint; c == nil || c.Step != 500 || c.Incarnation != 0 {
		t.Errorf("status.checkpoint %+v, want the master's report of incarnation 0 at step 500", c)
	}
	if after.Status.RestartCount != 1 || hasCondition(v1alpha1.JobRestarting, "")(after) {
		t.Errorf("after the node came back: restartCount %d, Restarting %v; want 1 and false", after.Status.RestartCount, hasCondition(v1alpha1.JobRestarting, "")(after))
	}
	now, err := jobPodsOf(ctx, ns, job.Name)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range second {
		if now[name].UID != p.UID {
			t.Errorf("pod %s of the running gang changed when the old node came back", name)
		}
	}
	short.check(t)
}
