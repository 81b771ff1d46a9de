package bench

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// ErrUnmodelled is wrapped by PlacementEfficiency's error when a pod's GPU
// set is unknown, so the placement cannot be modelled: Summarize counts such
// jobs instead of failing.
var ErrUnmodelled = errors.New("GPU set unknown")

// PlacementEfficiency returns the modelled all-reduce efficiency of the pods'
// placement: t(best placement of as many GPUs on an empty cluster of the
// profile holding most of them) / t(actual), in (0, 1], with the alpha-beta
// model of pkg/topology, messages of placement.DefaultMessageBytes and the
// cluster's fabric, so crossing an oversubscribed tier costs bandwidth. The
// reference placement fills whole nodes inside one domain of the narrowest
// network level that has enough nodes of the profile. A placement of one GPU
// is 1. Pods must be bound; a pod with an unknown GPU set gives an error
// wrapping ErrUnmodelled.
func PlacementEfficiency(c Cluster, pods []PodRun) (float64, error) {
	m, err := newClusterModel(c)
	if err != nil {
		return 0, err
	}
	return m.efficiency(pods)
}

// clusterModel is what the metrics need of a Cluster, derived once.
type clusterModel struct {
	cluster Cluster
	tree    *topology.Tree
	nodes   map[string]modelNode
	// leafLevel and nvlinkLevel are tree levels (1-based into
	// cluster.Levels); 0 when the model has no such level.
	leafLevel, nvlinkLevel int
	totalGPUs              int
	// references caches reference estimates by profile and GPU count.
	references map[referenceKey]topology.Estimate
}

type modelNode struct {
	profile topology.Profile
	hw      *topology.NodeTopology
}

type referenceKey struct {
	profile string
	gpus    int
}

func newClusterModel(c Cluster) (*clusterModel, error) {
	if len(c.Nodes) == 0 {
		return nil, fmt.Errorf("cluster %q has no nodes", c.Name)
	}
	labelled := make([]topology.NodeLabels, len(c.Nodes))
	for i, n := range c.Nodes {
		labelled[i] = topology.NodeLabels{Name: n.Name, Labels: n.Labels}
	}
	tree, err := topology.NewTree(c.Levels, labelled)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: building the domain tree: %w", c.Name, err)
	}
	m := &clusterModel{
		cluster:    c,
		tree:       tree,
		nodes:      make(map[string]modelNode, len(c.Nodes)),
		references: map[referenceKey]topology.Estimate{},
	}
	for i, l := range c.Levels {
		switch {
		case l.NVLink && m.nvlinkLevel == 0:
			m.nvlinkLevel = i + 1
		case !l.NVLink && m.leafLevel == 0:
			m.leafLevel = i + 1
		}
	}
	// Nodes of one profile in one NVLink domain share a topology: it is
	// read-only to the cost model.
	shared := map[[2]string]*topology.NodeTopology{}
	for _, n := range c.Nodes {
		profile, ok := topology.LookupProfile(n.Profile)
		if !ok {
			return nil, fmt.Errorf("node %s: profile %q is not built in: use one of %v", n.Name, n.Profile, topology.ProfileNames())
		}
		clique := ""
		if m.nvlinkLevel > 0 && profile.NVLinkDomainNodes > 0 {
			clique = n.Labels[c.Levels[m.nvlinkLevel-1].LabelKey]
			if clique == "" {
				clique = "standalone/" + n.Name
			}
		}
		key := [2]string{profile.Name, clique}
		hw := shared[key]
		if hw == nil {
			if hw, err = profile.Node(); err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			if hw.NVLinkDomain != nil {
				// The clique label names the domain; the profile's own
				// identity is a placeholder shared by every tray.
				hw.NVLinkDomain.ClusterUUID, hw.NVLinkDomain.CliqueID = clique, 0
			}
			shared[key] = hw
		}
		m.nodes[n.Name] = modelNode{profile: profile, hw: hw}
		m.totalGPUs += profile.GPUCount
	}
	return m, nil
}

// efficiency is PlacementEfficiency on the derived model.
func (m *clusterModel) efficiency(pods []PodRun) (float64, error) {
	if len(pods) == 0 {
		return 0, errors.New("no pods to rate")
	}
	sets := map[string]topology.GPUSet{}
	for _, p := range pods {
		if p.Node == "" {
			return 0, fmt.Errorf("pod %s is not bound to a node", p.Name)
		}
		node, ok := m.nodes[p.Node]
		if !ok {
			return 0, fmt.Errorf("pod %s is bound to node %s, which is not in cluster %q", p.Name, p.Node, m.cluster.Name)
		}
		if p.GPUs == 0 {
			return 0, fmt.Errorf("pod %s on node %s: %w", p.Name, p.Node, ErrUnmodelled)
		}
		if extra := p.GPUs &^ node.hw.AllGPUs(); extra != 0 {
			return 0, fmt.Errorf("pod %s: GPUs %v are not among the %d GPUs of node %s", p.Name, extra, node.hw.NumGPUs(), p.Node)
		}
		if both := sets[p.Node] & p.GPUs; both != 0 {
			return 0, fmt.Errorf("pod %s: GPUs %v of node %s are also another pod's of the job", p.Name, both, p.Node)
		}
		sets[p.Node] |= p.GPUs
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	slices.Sort(names)

	members := make([]topology.Member, len(names))
	byProfile := map[string]int{}
	for i, n := range names {
		node := m.nodes[n]
		members[i] = topology.Member{Node: node.hw, GPUs: sets[n], Path: m.tree.Path(n)}
		byProfile[node.profile.Name] += sets[n].Len()
	}
	actual, err := topology.EstimateAllReduce(members, placement.DefaultMessageBytes, m.cluster.Fabric)
	if err != nil {
		return 0, fmt.Errorf("estimating the placement's all-reduce: %w", err)
	}
	if actual.GPUs < 2 {
		return 1, nil
	}
	// The profile holding most GPUs is the reference, as in the controller's
	// placement summary; ties go to the first name.
	dominant := ""
	for name, n := range byProfile {
		if dominant == "" || n > byProfile[dominant] || n == byProfile[dominant] && name < dominant {
			dominant = name
		}
	}
	profile, _ := topology.LookupProfile(dominant)
	best, err := m.reference(profile, actual.GPUs)
	if err != nil {
		return 0, err
	}
	return topology.Efficiency(best, actual), nil
}

// reference estimates the best placement of gpus GPUs of profile p on this
// cluster when empty. topology.BestAllReduce puts them under one domain of
// the narrowest network level; a gang needing more nodes than any such
// domain has cannot be placed there, so the reference is taken at the
// narrowest network level that has a domain with enough nodes of the
// profile, by leaving the narrower network levels out of the levels it sees.
// Otherwise the best placement of a gang bigger than a leaf would rate below
// 1 under an oversubscribed spine.
func (m *clusterModel) reference(p topology.Profile, gpus int) (topology.Estimate, error) {
	key := referenceKey{p.Name, gpus}
	if est, ok := m.references[key]; ok {
		return est, nil
	}
	levels := m.cluster.Levels
	need := (gpus + p.GPUCount - 1) / p.GPUCount
	if need > 1 {
		levels = m.referenceLevels(p.Name, need)
	}
	est, err := topology.BestAllReduce(p, gpus, placement.DefaultMessageBytes, levels, m.cluster.Fabric)
	if err != nil {
		return topology.Estimate{}, fmt.Errorf("estimating the best placement of %d GPUs of %s: %w", gpus, p.Name, err)
	}
	m.references[key] = est
	return est, nil
}

// referenceLevels returns the cluster's levels without the network levels
// narrower than the first one with a domain holding need nodes of profile.
func (m *clusterModel) referenceLevels(profile string, need int) []topology.Level {
	kept := make([]topology.Level, 0, len(m.cluster.Levels))
	found := false
	for i, l := range m.cluster.Levels {
		if !l.NVLink && !found {
			if m.mostNodesInOneDomain(i+1, profile) < need {
				continue
			}
			found = true
		}
		kept = append(kept, l)
	}
	return kept
}

// mostNodesInOneDomain returns the largest number of nodes of profile in one
// domain of a tree level.
func (m *clusterModel) mostNodesInOneDomain(level int, profile string) int {
	most := 0
	for _, d := range m.tree.Domains(level) {
		n := 0
		for _, name := range d.Nodes {
			if m.nodes[name].profile.Name == profile {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
