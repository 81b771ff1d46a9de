package topologyplacement

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
)

// TestPreFilterLeavesOutStaleAndInvalidNodes plans a gang of two 8-GPU
// members on three empty nodes, a, b and c, some of whose NodeTopology is
// stale or invalid. Only the others are planned onto; a node that heartbeats
// again is planned onto again.
func TestPreFilterLeavesOutStaleAndInvalidNodes(t *testing.T) {
	tests := []struct {
		name string
		// stale and invalid name nodes; fresh are re-heartbeated after the
		// first PreFilter, before a second one.
		stale, invalid []string
		fresh          []string
		// want and wantAfter are the planned nodes; nil is Unschedulable.
		want, wantAfter []string
	}{
		{name: "all fresh", want: []string{"a", "b"}},
		{name: "a stale", stale: []string{"a"}, want: []string{"b", "c"}},
		{name: "b invalid", invalid: []string{"b"}, want: []string{"a", "c"}},
		{name: "a stale and b invalid: one node left", stale: []string{"a"}, invalid: []string{"b"}, want: nil},
		{
			name: "a stale and c invalid, then a heartbeats again", stale: []string{"a"}, invalid: []string{"c"},
			fresh: []string{"a"}, want: nil, wantAfter: []string{"a", "b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newMetricsPlugin(t, 2, true, nil)
			recorder := events.NewFakeRecorder(100)
			p.view = p.newNodeView(nil, recorder)
			now := p.TopologyPlacement.clock.Now()
			stale, invalid := sets.New(tc.stale...), sets.New(tc.invalid...)
			var nodes []fwk.NodeInfo
			for _, name := range []string{"a", "b", "c"} {
				beat := now
				if stale.Has(name) {
					beat = now.Add(-time.Hour)
				}
				nt := schedtesting.HGXNodeTopologyAt(t, name, beat)
				if invalid.Has(name) {
					nt = schedtesting.Malformed(nt)
				}
				p.view.Set(nil, nt)
				nodes = append(nodes, nodeInfo(gpuNode(name, 8)))
			}
			check := func(when string, want []string) {
				t.Helper()
				result, status := p.PreFilter(context.Background(), framework.NewCycleState(), p.pods[0], nodes)
				if want == nil {
					if status.Code() != fwk.UnschedulableAndUnresolvable {
						t.Errorf("%s: PreFilter = %v, %v; want unschedulable", when, result, status)
					}
					return
				}
				if !status.IsSuccess() {
					t.Fatalf("%s: PreFilter: %v; want a plan on %v", when, status, want)
				}
				if diff := cmp.Diff(want, sets.List(result.NodeNames)); diff != "" {
					t.Errorf("%s: planned nodes (-want,+got):\n%s", when, diff)
				}
			}
			check("first", tc.want)
			if tc.fresh == nil {
				return
			}
			p.clock.Step(time.Second)
			for _, name := range tc.fresh {
				nt := schedtesting.HGXNodeTopologyAt(t, name, p.TopologyPlacement.clock.Now())
				p.view.Set(nil, nt)
			}
			check("after a fresh heartbeat", tc.wantAfter)
			var reasons []string
			for _, e := range schedtesting.Events(recorder) {
				reasons = append(reasons, strings.SplitN(e, " ", 3)[1])
			}
			sort.Strings(reasons)
			if diff := cmp.Diff([]string{nodeview.EventTopologyInvalid, nodeview.EventTopologyRecovered, nodeview.EventTopologyStale}, reasons); diff != "" {
				t.Errorf("events (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestPlanDroppedWhenPlannedNodeGoesStale: a plan whose open slot is on a
// node that went stale is no longer valid.
func TestPlanDroppedWhenPlannedNodeGoesStale(t *testing.T) {
	p := newMetricsPlugin(t, 2, true, nil)
	p.args.TopologyMaxAge = &metav1.Duration{Duration: time.Minute}
	p.view = p.newNodeView(nil, nil)
	now := p.TopologyPlacement.clock.Now()
	for _, name := range []string{"a", "b"} {
		p.view.Set(nil, schedtesting.HGXNodeTopologyAt(t, name, now))
	}
	result, status := p.PreFilter(context.Background(), framework.NewCycleState(), p.pods[0], p.nodes)
	if !status.IsSuccess() || result.NodeNames.Len() != 2 {
		t.Fatalf("PreFilter = %v, %v; want a plan on a and b", result, status)
	}
	g, _ := p.gangs.Books.Get("ns/g#8")
	if !p.planStillValid(g, p.nodes) {
		t.Fatal("fresh plan invalid")
	}
	p.clock.Step(2 * time.Minute)
	p.view.Set(nil, schedtesting.HGXNodeTopologyAt(t, "b", p.TopologyPlacement.clock.Now()))
	if p.planStillValid(g, p.nodes) {
		t.Error("plan with an open slot on stale node a still valid")
	}
}
