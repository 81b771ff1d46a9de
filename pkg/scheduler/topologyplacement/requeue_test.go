package topologyplacement

import (
	"context"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
)

// TestEventsToRegister: every event carries a hint (one without would
// requeue every gang this plugin rejected on each heartbeat), and the events
// that free GPUs are all there.
func TestEventsToRegister(t *testing.T) {
	events, err := (&TopologyPlacement{}).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range events {
		if e.QueueingHintFn == nil {
			t.Errorf("%s has no QueueingHintFn", e.Event.Label())
		}
		got[e.Event.Label()] = true
		if e.Event.Resource == requeue.NodeTopologyResource {
			t.Errorf("%s is registered: the scheduler would keep unstructured copies of every NodeTopology", e.Event.Label())
		}
	}
	for _, want := range []fwk.ClusterEvent{
		{Resource: fwk.Pod, ActionType: fwk.Delete},
		{Resource: fwk.Pod, ActionType: fwk.UpdatePodScaleDown},
		{Resource: fwk.Node, ActionType: requeue.NodeActions},
		{Resource: requeue.PodGroupResource, ActionType: fwk.Add | fwk.Update},
		{Resource: fwk.ResourceClaim, ActionType: fwk.Update | fwk.Delete},
		{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update},
	} {
		if !got[want.Label()] {
			t.Errorf("missing event %s; have %v", want.Label(), got)
		}
	}
}
