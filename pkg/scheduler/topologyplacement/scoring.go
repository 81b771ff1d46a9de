package topologyplacement

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// maxLinkGBps normalises GPU-set bottleneck bandwidth into a score: NVLink5
// through the GB200 switch fabric, the fastest link any profile has.
const maxLinkGBps = 900

// PreScore skips pods that ask for no GPUs: their placement is the other
// plugins' business.
func (p *TopologyPlacement) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, err := stateOf(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s.req.GPUs == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score gives a gang member's planned nodes the gang weight. For a GPU pod
// outside gangs it scores the bottleneck bandwidth of the best free GPU set
// of the node, a table lookup per node.
func (p *TopologyPlacement) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := stateOf(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	if s.plan != nil {
		if len(s.plan.OpenSlotsOn(node.Name)) > 0 {
			return p.args.GangScoreWeight, nil
		}
		return 0, nil
	}
	quality, ok := p.bestSetQuality(node.Name, s.req.GPUs)
	if !ok {
		return 0, nil
	}
	score := int64(quality.BottleneckGBps / maxLinkGBps * float64(p.args.NVLinkScoreWeight))
	return min(score, p.args.NVLinkScoreWeight), nil
}

// bestSetQuality is the quality of the best free set of k GPUs on node: two
// map lookups and a table lookup, no allocation.
func (p *TopologyPlacement) bestSetQuality(node string, k int) (topology.SetQuality, bool) {
	_, q, ok := p.view.BestFree(node, k)
	return q, ok
}

// ScoreExtensions is nil: scores are already in [0, weight].
func (p *TopologyPlacement) ScoreExtensions() framework.ScoreExtensions { return nil }
