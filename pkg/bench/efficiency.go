package bench

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// ErrUnmodelled is wrapped by PlacementEfficiency's error when a pod's GPU
// set is unknown, so the placement cannot be modelled: Summarize counts such
// jobs instead of failing.
var ErrUnmodelled = errors.New("GPU set unknown")

// PlacementEfficiency returns the modelled all-reduce efficiency of the pods'
// placement: topology.Rater.Rate, the rating the scheduler and controller
// report, on the cluster model (its levels, oversubscription and nodes).
// Pods must be bound; a pod with an unknown GPU set gives an error wrapping
// ErrUnmodelled.
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
	// rater rates placements on the model; it caches the references.
	rater *topology.Rater
}

type modelNode struct {
	profile topology.Profile
	hw      *topology.NodeTopology
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
		cluster: c,
		tree:    tree,
		nodes:   make(map[string]modelNode, len(c.Nodes)),
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
	cfg := lockstep.TopologyConfig{Levels: c.Levels, Oversubscription: c.Fabric.Oversubscription}
	m.rater, err = topology.NewRater(cfg, tree, func(n string) string { return m.nodes[n].profile.Name }, topology.DefaultMessageBytes)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return m, nil
}

// efficiency is PlacementEfficiency on the derived model.
func (m *clusterModel) efficiency(pods []PodRun) (float64, error) {
	rating, err := m.rate(pods)
	if err != nil {
		return 0, err
	}
	return rating.Efficiency, nil
}

// rate rates the pods' placement with the model's Rater.
func (m *clusterModel) rate(pods []PodRun) (topology.Rating, error) {
	fail := func(err error) (topology.Rating, error) { return topology.Rating{}, err }
	if len(pods) == 0 {
		return fail(errors.New("no pods to rate"))
	}
	sets := map[string]topology.GPUSet{}
	for _, p := range pods {
		if p.Node == "" {
			return fail(fmt.Errorf("pod %s is not bound to a node", p.Name))
		}
		node, ok := m.nodes[p.Node]
		if !ok {
			return fail(fmt.Errorf("pod %s is bound to node %s, which is not in cluster %q", p.Name, p.Node, m.cluster.Name))
		}
		if p.GPUs == 0 {
			return fail(fmt.Errorf("pod %s on node %s: %w", p.Name, p.Node, ErrUnmodelled))
		}
		if extra := p.GPUs &^ node.hw.AllGPUs(); extra != 0 {
			return fail(fmt.Errorf("pod %s: GPUs %v are not among the %d GPUs of node %s", p.Name, extra, node.hw.NumGPUs(), p.Node))
		}
		if both := sets[p.Node] & p.GPUs; both != 0 {
			return fail(fmt.Errorf("pod %s: GPUs %v of node %s are also another pod's of the job", p.Name, both, p.Node))
		}
		sets[p.Node] |= p.GPUs
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	slices.Sort(names)

	members := make([]topology.Member, len(names))
	for i, n := range names {
		members[i] = topology.Member{Node: m.nodes[n].hw, GPUs: sets[n], Path: m.tree.Path(n)}
	}
	rating, err := m.rater.Rate(members)
	if err != nil {
		return fail(fmt.Errorf("rating the placement: %w", err))
	}
	return rating, nil
}
