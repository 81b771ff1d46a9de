package topologyplacement

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// rankedGangOnLeaves is a plugin with one ranked gang of members 8-GPU
// pods, pending, and as many 8-GPU HGX nodes in leaves of 32.
func rankedGangOnLeaves(b *testing.B, members int) *metricsPlugin {
	p := newMetricsPlugin(b, members, true, nil)
	for i, pod := range p.pods {
		pod.Annotations = map[string]string{lockstep.AnnotationRank: strconv.Itoa(i)}
	}
	p.nodes = make([]fwk.NodeInfo, members)
	for i := range p.nodes {
		node := gpuNode(fmt.Sprintf("node-%04d", i), 8)
		node.Labels = map[string]string{lockstep.LabelFabricTier0: fmt.Sprintf("leaf-%d", i/32)}
		p.view.Set(nil, hgxNodeTopology(b, node.Name))
		p.nodes[i] = nodeInfo(node)
	}
	return p
}

// BenchmarkFilter measures Filter on 1,024 8-GPU nodes in leaves of 32,
// with a 1,024-member gang planned onto them: a member on its rank's node
// (member), and a 1-GPU pod outside gangs on each node in turn, which the
// plan's held GPUs keep off (outside).
func BenchmarkFilter(b *testing.B) {
	const members = 1024
	ctx := context.Background()
	p := rankedGangOnLeaves(b, members)
	byName := map[string]fwk.NodeInfo{}
	for _, ni := range p.nodes {
		byName[ni.Node().Name] = ni
	}
	states := make([]fwk.CycleState, members)
	targets := make([]fwk.NodeInfo, members)
	for i, pod := range p.pods {
		states[i] = framework.NewCycleState()
		result, status := p.PreFilter(ctx, states[i], pod, p.nodes)
		if !status.IsSuccess() || result.NodeNames.Len() != 1 {
			b.Fatalf("PreFilter %s: %v", pod.Name, status)
		}
		targets[i] = byName[result.NodeNames.UnsortedList()[0]]
	}
	b.Run("member", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if status := p.Filter(ctx, states[i%members], p.pods[i%members], targets[i%members]); !status.IsSuccess() {
				b.Fatalf("Filter %s: %v", p.pods[i%members].Name, status)
			}
			i++
		}
	})
	b.Run("outside", func(b *testing.B) {
		pod := utiltesting.MakePod("single", "ns").GPUs(1).Obj()
		state := framework.NewCycleState()
		if _, status := p.PreFilter(ctx, state, pod, p.nodes); !status.IsSuccess() {
			b.Fatal(status)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if status := p.Filter(ctx, state, pod, p.nodes[i%members]); status.IsSuccess() {
				b.Fatalf("Filter put a pod outside gangs on %s, whose GPUs the plan holds", p.nodes[i%members].Node().Name)
			}
			i++
		}
	})
}
