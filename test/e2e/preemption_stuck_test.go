package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestStuckVictimReleasesTheHold: a low-priority gang of eight whole nodes
// (plain PodGroup pods, which nothing force-deletes) fills one leaf; work
// of high priority holds the rest of the cluster. One node of that leaf
// goes dark, and a high-priority gang that needs the whole leaf preempts
// the low gang: seven victims go after their 5 s grace period, the one on
// the dark node stays Terminating for good. While the hold waits, the
// preemptor's pods say which pod it waits for; the hold ends within its
// stated bound (the victims' longest grace period plus a drain stall,
// eight preferredWaits: this test's scheduler runs a 3 s preferredWait, so
// 5 + 24 s), with a PreemptionHoldExpired event on the preemptor's
// PodGroup naming the stuck pod and preemption_holds_expired_total
// counting it.
func TestStuckVictimReleasesTheHold(t *testing.T) {
	const (
		preferredWait = 3 * time.Second
		grace         = 5 * time.Second
		bound         = grace + 8*preferredWait
	)
	const sched = "scheduler-short-stall"
	rs := replicaSet{names: []string{sched}, describe: func(name string) (localcluster.Component, error) {
		cfg, err := localcluster.DeployedSchedulerConfig(cluster.RepoRoot)
		if err != nil {
			return localcluster.Component{}, err
		}
		for _, args := range localcluster.TopologyPlacementArgs(cfg) {
			args["preferredWait"] = preferredWait.String()
		}
		return cluster.KubeSchedulerComponent(name, lockstep.SchedulerName, cfg)
	}}
	runReplicas(t, "scheduler", cluster.SchedulerComponent, rs)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	leafRequired := map[string]string{lockstep.AnnotationTopologyLevel: lockstep.LevelLeaf, lockstep.AnnotationTopologyMode: string(lockstep.Required)}
	gang := func(name, class string) {
		pg := utiltesting.MakePodGroup(name, ns, 8).Obj()
		pg.Annotations = leafRequired
		if err := cluster.Client.Create(ctx, pg); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).GPUs(8).SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj()
			pod.Spec.PriorityClassName = class
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(grace / time.Second))
			cluster.CreatePods(t, pod)
		}
	}
	gang("victim", low)
	victims := waitGangBound(t, ns, "victim", 8, 2*time.Minute)
	fillRest(t, ns, high)
	dark, stuck := victims[0].Spec.NodeName, victims[0].Name
	darkenUntilCleanup(t, dark)

	gang("urgent", high)
	waitMarked(t, ns, map[string]types.UID{stuck: victims[0].UID})
	preempted := time.Now()
	waitPodsUnschedulable(t, "urgent", func(ctx context.Context) ([]corev1.Pod, error) { return gangPods(ctx, ns, "urgent") },
		"waits for "+ns+"/"+stuck+" to terminate")

	// The hold ends within its bound (plus the sweep's period and a
	// loaded machine's slack), said on the preemptor's PodGroup.
	var expired *corev1.Event
	err := localcluster.Poll(ctx, 250*time.Millisecond, bound+30*time.Second, "a "+gangpreemption.EventHoldExpired+" event naming "+stuck, func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "PodGroup", "urgent")
		if err != nil {
			return false, nil
		}
		i := slices.IndexFunc(events, func(e corev1.Event) bool {
			return e.Reason == gangpreemption.EventHoldExpired && strings.Contains(e.Message, ns+"/"+stuck)
		})
		if i >= 0 {
			expired = &events[i]
		}
		return expired != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hold released %s after the preemption (bound %s): %s", time.Since(preempted).Round(100*time.Millisecond), bound, expired.Message)
	samples, err := cluster.Scrape(ctx, sched)
	if err != nil {
		t.Fatal(err)
	}
	if n := samples.Find("lockstep_scheduler_preemption_holds_expired_total", nil).Sum(); n < 1 {
		t.Errorf("preemption_holds_expired_total = %v, want at least 1", n)
	}
}
