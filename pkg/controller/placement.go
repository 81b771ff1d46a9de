package controller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// placedPod is what the placement summary needs of a bound pod: its node
// and the GPU indices the scheduler chose for it (lockstep.dev/gpus, "0,1";
// empty for a pod without GPUs or placed by another scheduler).
type placedPod struct {
	Node string
	GPUs string
}

// placementNode is what the placement summary needs of a node: its labels,
// for the domain tree, and its NodeTopology spec, nil when it has none.
type placementNode struct {
	Labels   map[string]string
	Topology *v1alpha1.NodeTopologySpec
}

// summarizePlacement describes where a gang runs: the lowest common domain
// of its nodes in the tree of levels, and, when every pod has a GPU set and
// every node a topology, the modelled all-reduce bus bandwidth and its
// efficiency against the best placement of as many GPUs on an empty cluster
// of the profile holding most of them (as the scheduler rates its plans).
// Bandwidth and efficiency are left zero when they cannot be modelled.
func summarizePlacement(pods []placedPod, nodes map[string]placementNode, levels []topology.Level) (*v1alpha1.Placement, error) {
	if len(pods) == 0 {
		return nil, nil
	}
	gpus := map[string]topology.GPUSet{}
	modelled := true
	for _, p := range pods {
		set, err := parseGPUSet(p.GPUs)
		if err != nil {
			return nil, fmt.Errorf("pod on node %s: %w", p.Node, err)
		}
		if set == 0 {
			modelled = false
		}
		gpus[p.Node] |= set
	}
	names := make([]string, 0, len(gpus))
	for n := range gpus {
		names = append(names, n)
	}
	slices.Sort(names)

	labelled := make([]topology.NodeLabels, len(names))
	for i, n := range names {
		labelled[i] = topology.NodeLabels{Name: n, Labels: nodes[n].Labels}
	}
	tree, err := topology.NewTree(levels, labelled)
	if err != nil {
		return nil, fmt.Errorf("building the domain tree: %w", err)
	}
	dom, err := tree.LowestCommonDomain(names)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.Placement{Domain: domainID(dom), LevelName: dom.LevelName, LevelsSpanned: int32(dom.Level), Nodes: names}
	if dom.Level == 0 {
		out.Domain = names[0]
	}
	if !modelled {
		return out, nil
	}

	members := make([]topology.Member, len(names))
	byProfile := map[string]int{}
	for i, n := range names {
		spec := nodes[n].Topology
		if spec == nil {
			return out, nil
		}
		hw, err := spec.ToTopology()
		if err != nil {
			return out, fmt.Errorf("NodeTopology %s: %w", n, err)
		}
		members[i] = topology.Member{Node: hw, GPUs: gpus[n], Path: tree.Path(n)}
		if spec.Profile != "" {
			byProfile[spec.Profile] += gpus[n].Len()
		}
	}
	est, err := topology.EstimateAllReduce(members, placement.DefaultMessageBytes, topology.Fabric{})
	if err != nil {
		return out, fmt.Errorf("estimating the all-reduce: %w", err)
	}
	out.BusBandwidthMBps = int64(est.BottleneckGBps * 1000)

	dominant := ""
	for name, n := range byProfile {
		if n > byProfile[dominant] || n == byProfile[dominant] && name < dominant {
			dominant = name
		}
	}
	profile, ok := topology.LookupProfile(dominant)
	if !ok {
		return out, nil
	}
	best, err := topology.BestAllReduce(profile, est.GPUs, placement.DefaultMessageBytes, levels, topology.Fabric{})
	if err != nil {
		return out, fmt.Errorf("estimating the best all-reduce: %w", err)
	}
	out.Efficiency = v1alpha1.FormatEfficiency(topology.Efficiency(best, est))
	return out, nil
}

// domainID is a domain's ID without the "level=()" segments of levels no
// node is labelled for: "block=()/spine=s1" reads "spine=s1".
func domainID(d *topology.Domain) string {
	parts := strings.Split(d.ID, "/")
	kept := parts[:0]
	for _, p := range parts {
		if !strings.HasSuffix(p, "=()") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "/")
}

// parseGPUSet reads the scheduler's lockstep.dev/gpus annotation, "0,1,5";
// empty for a pod without one.
func parseGPUSet(s string) (topology.GPUSet, error) {
	if s == "" {
		return 0, nil
	}
	return topology.ParseGPUList(s)
}
