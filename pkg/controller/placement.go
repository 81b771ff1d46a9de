package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// placedPod is what the placement summary needs of a bound pod: its node
// and the GPU indices the scheduler chose for it (lockstep.dev/gpus, "0,1";
// empty for a pod without GPUs or placed by another scheduler).
type placedPod struct {
	Node string
	GPUs string
}

// placementNode is what the placement summary needs of a node of the gang:
// its NodeTopology spec, nil when it has none.
type placementNode struct {
	Topology *v1alpha1.NodeTopologySpec
}

// placementCluster is the cluster as the placement summary sees it: the
// domain tree of every node and the topology.Rater on it, which places the
// reference where the cluster has room, as the scheduler's does.
type placementCluster struct {
	tree  *topology.Tree
	rater *topology.Rater
}

// newPlacementCluster builds the tree of nodes with cfg's levels and its
// Rater, naming node profiles from their labels.
func newPlacementCluster(cfg lockstep.TopologyConfig, nodes []topology.NodeLabels) (*placementCluster, error) {
	tree, err := topology.NewTree(cfg.Levels, nodes)
	if err != nil {
		return nil, fmt.Errorf("building the domain tree: %w", err)
	}
	profiles := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if p, ok := topology.ProfileFromLabels(n.Labels); ok {
			profiles[n.Name] = p.Name
		}
	}
	rater, err := topology.NewRater(cfg, tree, func(n string) string { return profiles[n] }, topology.DefaultMessageBytes)
	if err != nil {
		return nil, err
	}
	return &placementCluster{tree: tree, rater: rater}, nil
}

// placementCache keeps the placementCluster between reconciles, rebuilt
// when node names or their level or profile labels change.
type placementCache struct {
	mu          sync.Mutex
	fingerprint uint64
	cluster     *placementCluster
}

func (c *placementCache) get(cfg lockstep.TopologyConfig, nodes []corev1.Node) (*placementCluster, error) {
	h := fnv.New64a()
	keys := []string{lockstep.LabelProfile, lockstep.LabelGPUProduct, lockstep.LabelNVIDIAGPUProduct}
	for _, l := range cfg.Levels {
		keys = append(keys, l.LabelKey)
	}
	for i := range nodes {
		h.Write([]byte(nodes[i].Name))
		h.Write([]byte{0})
		for _, k := range keys {
			h.Write([]byte(nodes[i].Labels[k]))
			h.Write([]byte{0})
		}
	}
	fp := h.Sum64()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cluster != nil && c.fingerprint == fp {
		return c.cluster, nil
	}
	labelled := make([]topology.NodeLabels, len(nodes))
	for i := range nodes {
		labelled[i] = topology.NodeLabels{Name: nodes[i].Name, Labels: nodes[i].Labels}
	}
	cluster, err := newPlacementCluster(cfg, labelled)
	if err != nil {
		return nil, err
	}
	c.fingerprint, c.cluster = fp, cluster
	return cluster, nil
}

// maxReason is the CRD's bound on status.placement.reason.
const maxReason = 1024

// summarizePlacement describes where a gang runs: the lowest common domain
// of its nodes in the cluster's tree, the levels it spans, and, when every
// pod has a GPU set and every node a topology, the placement's
// topology.Rating: the modelled all-reduce bus bandwidth, the efficiency
// and its reason, as the scheduler rates its plans. Bandwidth, efficiency
// and reason are left empty when they cannot be modelled.
func summarizePlacement(pods []placedPod, nodes map[string]placementNode, cluster *placementCluster) (*v1alpha1.Placement, error) {
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

	dom, err := cluster.tree.LowestCommonDomain(names)
	if err != nil {
		return nil, err
	}
	spanned, err := cluster.tree.LevelsSpanned(names)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.Placement{Domain: dom.DisplayID(), LevelName: dom.LevelName, LevelsSpanned: int32(spanned), Nodes: names}
	if !modelled {
		return out, nil
	}

	members := make([]topology.Member, len(names))
	for i, n := range names {
		spec := nodes[n].Topology
		if spec == nil {
			return out, nil
		}
		hw, err := spec.ToTopology()
		if err != nil {
			return out, fmt.Errorf("NodeTopology %s: %w", n, err)
		}
		members[i] = topology.Member{Node: hw, GPUs: gpus[n], Path: cluster.tree.Path(n)}
	}
	rating, err := cluster.rater.Rate(members)
	if err != nil {
		return out, fmt.Errorf("rating the placement: %w", err)
	}
	out.BusBandwidthMBps = int64(rating.Actual.BottleneckGBps * 1000)
	out.Efficiency = lockstep.FormatEfficiency(rating.Efficiency)
	out.Reason = rating.Reason
	if len(out.Reason) > maxReason {
		out.Reason = strings.ToValidUTF8(out.Reason[:maxReason-len("…")], "") + "…"
	}
	return out, nil
}

// parseGPUSet reads the scheduler's lockstep.dev/gpus annotation, "0,1,5";
// empty for a pod without one.
func parseGPUSet(s string) (topology.GPUSet, error) {
	if s == "" {
		return 0, nil
	}
	return topology.ParseGPUList(s)
}

// ensurePlacement summarizes where the gang runs once every pod is bound.
func (r *TrainingJobReconciler) ensurePlacement(ctx context.Context, job *v1alpha1.TrainingJob, obs observation) (complete bool, err error) {
	placed := make([]placedPod, 0, len(obs.live))
	nodes := map[string]placementNode{}
	complete = true
	for _, p := range obs.live {
		if p.Spec.NodeName == "" {
			return false, nil
		}
		placed = append(placed, placedPod{Node: p.Spec.NodeName, GPUs: p.Annotations[lockstep.AnnotationGPUs]})
		if _, ok := nodes[p.Spec.NodeName]; ok {
			continue
		}
		var info placementNode
		var nt v1alpha1.NodeTopology
		switch err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &nt); {
		case err == nil:
			info.Topology = &nt.Spec
		case apierrors.IsNotFound(err):
			// Its agent has not published yet: summarize what is known and
			// come back for the efficiency.
			complete = false
		default:
			return false, fmt.Errorf("getting NodeTopology %s: %w", p.Spec.NodeName, err)
		}
		nodes[p.Spec.NodeName] = info
	}
	// Every node, from the cache: the reference placement of the rating is
	// the best the empty cluster allows.
	var all corev1.NodeList
	if err := r.Client.List(ctx, &all); err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	cluster, err := r.placements.get(r.Topology, all.Items)
	if err != nil {
		return false, err
	}
	// Recomputed on every pass (the cluster's tree and references are
	// cached); the status is only written when the summary changes.
	pl, err := summarizePlacement(placed, nodes, cluster)
	if pl != nil {
		job.Status.Placement = pl
	}
	return complete, err
}
