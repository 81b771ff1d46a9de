package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
)

// stopFakeAgent kills the suite's fake topology agent, so that what the
// test writes to NodeTopology objects stays, and starts it again when the
// test ends.
func stopFakeAgent(t *testing.T) (restart func()) {
	t.Helper()
	if err := cluster.KillComponent("topology-agent"); err != nil {
		t.Fatal(err)
	}
	restart = func() {
		if _, running := cluster.Component("topology-agent"); running {
			return
		}
		comp, err := cluster.FakeAgentComponent()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.StartComponent(context.Background(), comp); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(restart)
	return restart
}

// waitTopologyEvent waits for an event with reason on the NodeTopology of
// node, from the scheduler, and returns its message.
func waitTopologyEvent(t *testing.T, node, reason string) string {
	t.Helper()
	var msg string
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, reason+" event on NodeTopology "+node, func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, metav1.NamespaceDefault, "NodeTopology", node)
		if err != nil {
			return false, nil
		}
		for _, e := range events {
			if e.Reason == reason && (e.ReportingController == localcluster.SchedulerName || e.Source.Component == localcluster.SchedulerName) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// waitNodesExcluded waits until the scheduler's nodes_excluded gauge reads
// want by reason.
func waitNodesExcluded(t *testing.T, want map[string]float64) {
	t.Helper()
	var got map[string]float64
	err := localcluster.Poll(context.Background(), 500*time.Millisecond, time.Minute, fmt.Sprintf("nodes_excluded %v", want), func(ctx context.Context) (bool, error) {
		s, err := cluster.Scrape(ctx, "scheduler")
		if err != nil {
			return false, nil
		}
		got = map[string]float64{}
		for reason := range want {
			series := s.Find("lockstep_scheduler_nodes_excluded", map[string]string{"reason": reason})
			if len(series) == 0 {
				return false, nil
			}
			got[reason] = series.Sum()
		}
		for reason, v := range want {
			if got[reason] != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v: last %v", err, got)
	}
}

// TestStaleAndInvalidTopologyLeftOut: with the fake agent stopped, one
// node's NodeTopology gets a heartbeat an hour old (beyond the scheduler's
// topologyMaxAge of 5m) and another's spec a PCIe link that claims NVLinks,
// which the CRD's CEL rules accept but validation refuses. The scheduler says so in
// an event on each NodeTopology and in nodes_excluded; a gang of 30 members
// on the 32 empty nodes is placed on the 30 others, and a one-member gang
// that only those two nodes could take waits. When the agent runs again it
// heartbeats and rewrites the spec: the nodes are used again and the
// waiting gang is placed on one of them.
func TestStaleAndInvalidTopologyLeftOut(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	for _, n := range cluster.Model.Nodes() {
		waitNodeTopology(t, n.Name, "heartbeating", func(nt *v1alpha1.NodeTopology) bool { return !nt.Status.HeartbeatTime.IsZero() })
	}
	// The agent reports pods gone at its next read: stopped before that,
	// it would leave an earlier test's GPUs taken for good.
	waitTopologyCaughtUp(t)
	restartAgent := stopFakeAgent(t)
	leaf0 := nodesByLeaf()["leaf-0"]
	staleNode, badNode := leaf0[0], leaf0[1]

	nt := &v1alpha1.NodeTopology{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Name: staleNode}, nt); err != nil {
		t.Fatal(err)
	}
	old := nt.DeepCopy()
	nt.Status.HeartbeatTime = metav1.NewTime(time.Now().Add(-time.Hour))
	if err := cluster.Client.Status().Patch(ctx, nt, client.MergeFrom(old)); err != nil {
		t.Fatalf("ageing %s's heartbeat: %v", staleNode, err)
	}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Name: badNode}, nt); err != nil {
		t.Fatal(err)
	}
	// The CRD's CEL rules refuse out-of-range and self links and a wrong
	// number of links; a PCIe link that claims NVLinks passes them (only
	// NVLink classes are checked there) and fails validation.
	nt.Spec.Links[0].Class, nt.Spec.Links[0].NVLinks = "PIX", 4
	if err := cluster.Client.Update(ctx, nt); err != nil {
		t.Fatalf("the apiserver refused a PCIe link with NVLinks in %s's NodeTopology: %v", badNode, err)
	}

	msg := waitTopologyEvent(t, staleNode, nodeview.EventTopologyStale)
	if !strings.Contains(msg, "topologyMaxAge 5m0s") || !strings.Contains(msg, "last heartbeat 1h") {
		t.Errorf("TopologyStale event %q does not name the age and the limit", msg)
	}
	msg = waitTopologyEvent(t, badNode, nodeview.EventTopologyInvalid)
	if !strings.Contains(msg, "links[") {
		t.Errorf("TopologyInvalid event %q does not name the bad link", msg)
	}
	waitNodesExcluded(t, map[string]float64{"stale": 1, "invalid": 1})

	nodes := cluster.Model.NodeCount()
	createGang(t, ns, "wide", nodes-2, 8, nil)
	for _, p := range waitGangBound(t, ns, "wide", nodes-2, 2*time.Minute) {
		if p.Spec.NodeName == staleNode || p.Spec.NodeName == badNode {
			t.Errorf("member %s placed on %s, whose NodeTopology is stale or invalid", p.Name, p.Spec.NodeName)
		}
	}
	createGang(t, ns, "last", 1, 8, nil)
	waitForEvent(t, ns, "last-0", "FailedScheduling")
	assertNotBound(t, ns, "last-0")

	restartAgent()
	waitTopologyEvent(t, staleNode, nodeview.EventTopologyRecovered)
	waitTopologyEvent(t, badNode, nodeview.EventTopologyRecovered)
	waitNodesExcluded(t, map[string]float64{"stale": 0, "invalid": 0})
	pods := waitGangBound(t, ns, "last", 1, time.Minute)
	if n := pods[0].Spec.NodeName; n != staleNode && n != badNode {
		t.Errorf("last gang placed on %s, want %s or %s (the only free nodes)", n, staleNode, badNode)
	}
	deleteGang(t, ns, "wide")
	deleteGang(t, ns, "last")
}

func assertNotBound(t *testing.T, ns, name string) {
	t.Helper()
	pod, err := cluster.Clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "" {
		t.Fatalf("pod %s bound to %s, want it pending", name, pod.Spec.NodeName)
	}
}
