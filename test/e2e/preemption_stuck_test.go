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
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
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
// counting it, and the leaf is open again: a low-priority pod binds there.
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
	leaf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leaf[n.Name] = n.Labels[leafLabel]
	}
	t.Cleanup(func() {
		if err := cluster.RestoreNode(ctx, dark); err != nil {
			t.Error(err)
			return
		}
		if err := cluster.WaitNodesReady(ctx, 3*time.Minute); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.DarkenNode(ctx, dark); err != nil {
		t.Fatal(err)
	}

	gang("urgent", high)
	waitMarked(t, ns, map[string]types.UID{stuck: victims[0].UID})
	preempted := time.Now()
	want := "waits for " + ns + "/" + stuck + " to terminate"
	var msgs []string
	err := localcluster.Poll(ctx, 200*time.Millisecond, bound, "the preemptor saying it waits for "+stuck, func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, "urgent")
		if err != nil {
			return false, nil
		}
		msgs = msgs[:0]
		for _, p := range pods {
			if _, c := podutil.GetPodConditionFromList(p.Status.Conditions, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
				msgs = append(msgs, c.Message)
				if strings.Contains(c.Message, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("%v; the preemptor's messages: %q", err, msgs)
	}

	// The hold ends within its bound (plus the sweep's period and a
	// loaded machine's slack), said on the preemptor's PodGroup.
	var expired *corev1.Event
	err = localcluster.Poll(ctx, 250*time.Millisecond, bound+30*time.Second, "a "+gangpreemption.EventHoldExpired+" event naming "+stuck, func(ctx context.Context) (bool, error) {
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

	// The leaf is open again to work of the victims' priority.
	var free string
	for _, v := range victims[1:] {
		free = v.Spec.NodeName
	}
	probe := utiltesting.MakePod("after", ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
	probe.Spec.PriorityClassName = low
	probe.Spec.NodeSelector = map[string]string{corev1.LabelHostname: free}
	cluster.CreatePods(t, probe)
	if node := waitBound(t, ns, "after"); leaf[node] != leaf[dark] {
		t.Errorf("the low-priority pod runs on %s in %s, want the reopened %s", node, leaf[node], leaf[dark])
	}
}
