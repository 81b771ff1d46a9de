package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestSchedulerFailoverMidPreemption: two lockstep-scheduler replicas with
// leader election; four low-priority jobs fill the four leaves. A
// high-priority leaf:Required job preempts the youngest, whose pods take
// their whole 30 s grace period to go, and the leader is killed as soon
// as the first victim is marked. The standby takes over while the victims
// still terminate: it rebuilds the hold from them (their DisruptionTarget
// condition names the preemptor's plan and domain) and evicts nothing
// more, and the preemptor runs in the leaf the first leader freed. Without
// the rebuild the standby sees the terminating victims' room as taken and
// evicts a second job.
func TestSchedulerFailoverMidPreemption(t *testing.T) {
	rs := replicaSet{names: []string{"scheduler-a", "scheduler-b"}, describe: func(name string) (localcluster.Component, error) {
		return cluster.SchedulerReplicaComponent(name, framework.FastLeaderElection())
	}}
	runReplicas(t, "scheduler", cluster.SchedulerComponent, rs)
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	before, youngest := fillLeaves(t, ns, func(name string) *v1alpha1.TrainingJob { return slowShutdownJob(ns, name, 7, low) })
	victimLeaf := oneLeaf(t, youngest)

	leader := rs.leader(t)
	createJob(t, checkpointingJob(ns, "high", 3, 8, high, true))
	waitMarked(t, ns, before["low-3"])
	if err := cluster.KillComponent(leader); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	restarted := rs.restartAsync(leader)

	waitPreempted(t, ns, before["low-3"], ns+"/high", highPriority)
	running := waitPods(t, ns, "high", 4, 2*time.Minute)
	t.Logf("%s killed mid-preemption; high running whole %s later", leader, time.Since(killedAt).Round(100*time.Millisecond))
	if leaf := oneLeaf(t, running); leaf != victimLeaf {
		t.Errorf("high runs in %s; the first leader freed %s", leaf, victimLeaf)
	}
	for _, i := range []int{0, 1, 2} {
		checkUntouched(t, ns, fmt.Sprintf("low-%d", i), before[fmt.Sprintf("low-%d", i)])
	}
	waitJob(t, ns, "low-3", time.Minute, "low-3 preempted once", preempted(ns+"/high", highPriority))
	if err := restarted(); err != nil {
		t.Fatalf("restarting %s: %v", leader, err)
	}
}

// slowShutdownJob is checkpointingJob's leaf:Required gang of 1 + workers
// 8-GPU pods whose pods take their whole 30 s grace period to go (the
// harness's default): long enough for a leader to die and another to take
// over while they go.
func slowShutdownJob(ns, name string, workers int32, class string) *v1alpha1.TrainingJob {
	tpl := utiltesting.MakePodTemplate("pytorch").CPU("1").GPULimit(8).Obj()
	tpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	return pytorchGang(ns, name, workers, tpl).PriorityClass(class).
		Topology(lockstep.LevelLeaf, v1alpha1.TopologyRequired).Obj()
}

// waitMarked waits until a pod of want is being deleted: the leader's
// eviction of the preemption has begun.
func waitMarked(t *testing.T, ns string, want map[string]types.UID) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 50*time.Millisecond, time.Minute, "a victim being deleted", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if uid, ok := want[p.Name]; ok && p.UID == uid && p.DeletionTimestamp != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
