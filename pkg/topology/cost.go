package topology

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Per-step latencies of the alpha-beta model. A ring all-reduce over n GPUs
// takes 2(n−1) steps and every step waits for the slowest hop of the ring, so
// the latency term is L = 2(n−1)·α with α the step latency of that hop. The
// values are round numbers of the order NCCL's own tuning model uses; they
// only matter for small messages, where bandwidth stops dominating.
const (
	// NVLinkStepLatency is a step over NVLink or NVSwitch, within a node or
	// across a multi-node NVLink domain.
	NVLinkStepLatency = 1 * time.Microsecond
	// PCIeStepLatency is a step over any PCIe path (PIX to SYS).
	PCIeStepLatency = 2 * time.Microsecond
	// NetworkStepLatency is a step between nodes under one switch: NIC, wire,
	// switch, wire, NIC, plus the proxy thread.
	NetworkStepLatency = 5 * time.Microsecond
	// NetworkTierLatency is added per network tier climbed above the first:
	// two more switch hops and their cables.
	NetworkTierLatency = 1 * time.Microsecond
)

// Member is one node's part of a placement.
type Member struct {
	Node *NodeTopology
	GPUs GPUSet
	// Path is the node's domains from host to root (Tree.Path). It may be
	// nil in a single-member placement.
	Path []*Domain
}

// Fabric describes the network between nodes beyond what the domain tree
// says.
type Fabric struct {
	// Oversubscription maps a level name to the factor by which bandwidth
	// is divided for traffic whose lowest common domain is at that level:
	// 2 for a spine fed by 2:1 oversubscribed leaf uplinks. Missing levels,
	// and factors below 1, count as 1 (non-blocking).
	Oversubscription map[string]float64
}

func (f Fabric) oversubscription(level string) float64 {
	if o := f.Oversubscription[level]; o > 1 {
		return o
	}
	return 1
}

// Estimate is the modelled cost of one all-reduce on a placement.
type Estimate struct {
	// Time is L + 2(n−1)/n · S / B.
	Time time.Duration
	// Latency is the L term.
	Latency time.Duration
	// BottleneckGBps is B, the per-GPU bus bandwidth of the ring in GB/s.
	BottleneckGBps float64
	GPUs           int
	Nodes          int
	// Level and LevelName are the tree level of the narrowest domain holding
	// the whole placement: how many levels it spans (0, "host" on one node).
	Level     int
	LevelName string
}

// EstimateAllReduce models a ring all-reduce of messageBytes (S) on each GPU
// of the placement with the alpha-beta model t = L + 2(n−1)/n · S / B.
//
// B is the bottleneck per-GPU bandwidth. On one node it is the weakest link
// within the GPU set. Across nodes it is the lower of the weakest intra-node
// link of any member and the inter-node bandwidth: NVLink when all members
// share one multi-node NVLink domain, otherwise each GPU's share of its
// nearest NICs divided by the oversubscription of the placement's lowest
// common level, the highest tier its traffic crosses. Charging every GPU
// its own NIC share is a conservative bound: NCCL's parallel rings can come
// closer to the node's total NIC bandwidth.
//
// Members must be on distinct nodes, with Paths from one tree when there are
// several.
func EstimateAllReduce(members []Member, messageBytes int64, fabric Fabric) (Estimate, error) {
	if len(members) == 0 {
		return Estimate{}, errors.New("placement has no members")
	}
	costs := make([]memberCost, len(members))
	for i, m := range members {
		if m.Node == nil {
			return Estimate{}, fmt.Errorf("members[%d] has no node topology", i)
		}
		if m.GPUs == 0 || m.GPUs&^m.Node.AllGPUs() != 0 {
			return Estimate{}, fmt.Errorf("members[%d]: GPU set %v is empty or not within the node's %d GPUs", i, m.GPUs, m.Node.NumGPUs())
		}
		costs[i] = newMemberCost(m.Node, m.GPUs)
	}
	sp, err := spanOf(members)
	if err != nil {
		return Estimate{}, err
	}
	shared := true
	for _, m := range members[1:] {
		shared = shared && sameNVLinkDomain(members[0].Node.NVLinkDomain, m.Node.NVLinkDomain)
	}
	return ringEstimate(costs, sp, shared, messageBytes, fabric)
}

// BestAllReduce estimates the reference placement of gpus GPUs of profile p
// on an empty cluster, for Efficiency: full nodes, the remainder on one more
// node in its best GPU set, all under one leaf (the narrowest network level)
// or, for NVLink-domain profiles needing at most NVLinkDomainNodes nodes, in
// one NVLink domain. It assumes a leaf can hold them all; Rater.Rate, the
// placement efficiency every component reports, places the same reference
// where the cluster has room for it instead.
//
// Packing is the best placement on NVSwitch machines. On PCIe machines the
// model can rate a spread placement higher (two half nodes, one per socket,
// avoid the SYS link); Efficiency reads such placements as 1.
func BestAllReduce(p Profile, gpus int, messageBytes int64, levels []Level, fabric Fabric) (Estimate, error) {
	if gpus < 1 {
		return Estimate{}, fmt.Errorf("gpus = %d: want at least 1", gpus)
	}
	if err := lockstep.ValidateLevels(levels); err != nil {
		return Estimate{}, fmt.Errorf("invalid levels: %w", err)
	}
	costs, shared, err := bestCosts(p, gpus)
	if err != nil {
		return Estimate{}, err
	}
	return ringEstimate(costs, bestSpan(levels, len(costs), shared), shared, messageBytes, fabric)
}

// Efficiency returns t_best / t_actual in (0, 1]: 1 when the placement is as
// good as the best one. Placements with no communication (one GPU) are 1.
func Efficiency(best, actual Estimate) float64 {
	if best.Time <= 0 || actual.Time <= 0 {
		return 1
	}
	return min(1, float64(best.Time)/float64(actual.Time))
}

// span is where a placement meets in the tree.
type span struct {
	level int
	name  string
	tier  int
}

// spanOf finds the members' lowest common domain from their paths.
func spanOf(members []Member) (span, error) {
	if len(members) == 1 {
		return span{level: 0, name: lockstep.LevelHost}, nil
	}
	first := members[0].Path
	if len(first) == 0 {
		return span{}, errors.New("members[0] has no domain path: a multi-node placement needs Tree.Path for every member")
	}
	// Duplicate hosts: a pairwise scan for gangs of a few hundred nodes,
	// which allocates nothing, a map beyond.
	var hosts map[*Domain]int
	if len(members) > 256 {
		hosts = make(map[*Domain]int, len(members))
	}
	for i, m := range members {
		if len(m.Path) != len(first) || m.Path[len(m.Path)-1] != first[len(first)-1] {
			return span{}, fmt.Errorf("members[%d] has no domain path from the same tree as members[0]", i)
		}
		prev, dup := -1, false
		if hosts != nil {
			prev, dup = hosts[m.Path[0]]
			hosts[m.Path[0]] = i
		} else {
			for j := range i {
				if members[j].Path[0] == m.Path[0] {
					prev, dup = j, true
					break
				}
			}
		}
		if dup {
			return span{}, fmt.Errorf("members[%d] and members[%d] are the same node %q: merge their GPU sets", prev, i, m.Path[0].Value)
		}
	}
	level := 0
	for ; level < len(first); level++ {
		same := true
		for _, m := range members[1:] {
			same = same && m.Path[level] == first[level]
		}
		if same {
			break
		}
	}
	d := first[level].widestEquivalent()
	return span{level: d.Level, name: d.LevelName, tier: d.tier}, nil
}

// bestSpan is the span of the best placement of nodes nodes: the host, else
// the narrowest NVLink level when the nodes share an NVLink domain, else the
// narrowest network level (or the cluster when no network level exists).
func bestSpan(levels []Level, nodes int, nvlinkShared bool) span {
	if nodes == 1 {
		return span{level: 0, name: lockstep.LevelHost}
	}
	for i, l := range levels {
		if l.NVLink == nvlinkShared {
			return span{level: i + 1, name: l.Name, tier: 1}
		}
	}
	if nvlinkShared {
		return bestSpan(levels, nodes, false)
	}
	return span{level: len(levels) + 1, name: lockstep.LevelCluster, tier: 1}
}

// memberCost is what the ring model needs from one member.
type memberCost struct {
	quality SetQuality
	// step is the latency of the slowest hop within the member's GPU set.
	step time.Duration
	// fabricGBps is the node's multi-node NVLink bandwidth per GPU, if any.
	fabricGBps float64
}

func newMemberCost(node *NodeTopology, set GPUSet) memberCost {
	c := memberCost{quality: node.SetQuality(set), step: NVLinkStepLatency}
	for rest := uint64(set); rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros64(rest)
		for others := rest & (rest - 1); others != 0; others &= others - 1 {
			if !node.Links[i][bits.TrailingZeros64(others)].Class.IsNVLink() {
				c.step = PCIeStepLatency
			}
		}
	}
	if node.NVLinkDomain != nil {
		c.fabricGBps = node.NVLinkDomain.GBps
	}
	return c
}

func ringEstimate(members []memberCost, sp span, nvlinkShared bool, messageBytes int64, fabric Fabric) (Estimate, error) {
	if messageBytes < 0 {
		return Estimate{}, fmt.Errorf("message size %d bytes: want at least 0", messageBytes)
	}
	est := Estimate{Nodes: len(members), Level: sp.level, LevelName: sp.name}
	bottleneck := math.Inf(1)
	var step time.Duration
	for _, m := range members {
		est.GPUs += m.quality.GPUs
		if m.quality.GPUs > 1 {
			bottleneck = min(bottleneck, m.quality.BottleneckGBps)
			step = max(step, m.step)
		}
	}
	if len(members) > 1 {
		inter := math.Inf(1)
		var interStep time.Duration
		if nvlinkShared {
			interStep = NVLinkStepLatency
			for _, m := range members {
				inter = min(inter, m.fabricGBps)
			}
		} else {
			for i, m := range members {
				if m.quality.NICGBpsPerGPU <= 0 {
					return Estimate{}, fmt.Errorf("members[%d]: some GPUs have no NIC, so the placement cannot span nodes", i)
				}
				inter = min(inter, m.quality.NICGBpsPerGPU)
			}
			inter /= fabric.oversubscription(sp.name)
			interStep = NetworkStepLatency + time.Duration(max(0, sp.tier-1))*NetworkTierLatency
		}
		bottleneck = min(bottleneck, inter)
		step = max(step, interStep)
	}
	if est.GPUs == 1 {
		return est, nil
	}
	n := float64(est.GPUs)
	est.BottleneckGBps = bottleneck
	est.Latency = time.Duration(2*(est.GPUs-1)) * step
	transfer := 2 * (n - 1) / n * float64(messageBytes) / (bottleneck * 1e9)
	est.Time = est.Latency + time.Duration(math.Round(transfer*1e9))
	return est, nil
}
