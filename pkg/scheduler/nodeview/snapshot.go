package nodeview

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Snapshot builds the planner's view of the nodes a member of gang (a plan
// key) asking req could use: schedulable for the pod (unschedulable flag,
// taints, required node affinity), with free GPUs net of allocations the
// agents report, of pods reserved through plans, and of capacity other
// plans hold. Give it back with Recycle once the plan is made.
func (v *View) Snapshot(pod *v1.Pod, gang string, req Request, nodeInfos []fwk.NodeInfo) (*placement.Snapshot, error) {
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	hostCheck := newHostCheck(pod, affinity)
	// Drains keep the gang off only if it does not outrank them.
	priority := corev1helpers.PodPriority(pod)
	// Nodes whose NodeTopology is stale or invalid are not planned onto:
	// judged once per plan, not per node per pod.
	excluded := v.health.refresh()
	snap := &placement.Snapshot{
		Fabric: topology.Fabric{Oversubscription: v.config.Oversubscription},
		Levels: v.config.Levels,
	}
	// A pod that claims GPUs is planned on the DRA driver's devices, and
	// one that claims a ComputeDomain channel on nodes with one free.
	dra, err := v.draViewFor(req)
	if err != nil {
		return nil, err
	}
	channels, err := v.channelsFor(req)
	if err != nil {
		return nil, err
	}
	// The GPU index and the books are read for every node: locked once for
	// the snapshot, not twice per node.
	v.gpus.mu.RLock()
	core := v.held.LockCore()
	v.rows.mu.Lock()
	rows := v.rows.align(len(nodeInfos), v.gpus.epoch)
	v.rows.catchUp(core)
	doneDRA := func() {}
	if dra != nil {
		doneDRA = dra.devices.read()
	}
	// One array holds every planner node, recycled from a finished plan
	// where there is one: at 25,000 nodes it is 2 MB a plan.
	bufs := v.rows.take(len(nodeInfos))
	nodes := bufs.nodes[:0]
	// The gang's own open slots count as free for it: only a gang with a
	// plan still open reads the books per node.
	own, holds := core.Get(gang)
	ownOpen := holds && !own.Complete()
	moved := false
	// sameNodes says every position holds the Node object it held in the
	// last plan, which built the tree cache's fingerprint from them: the
	// tree cache need not compare them again (treeCache.get).
	sameNodes := true
	for i, ni := range nodeInfos {
		node := ni.Node()
		row := &rows[i]
		if node == nil {
			sameNodes = false
			continue
		}
		sameNodes = sameNodes && row.node == node && row.info == ni
		moved = moved || row.misplaced(ni, node)
		v.refreshRow(row, ni, node)
		if !hostCheck.admits(row) {
			continue
		}
		if _, out := excluded[row.name]; out {
			continue
		}
		pn := plannerNode(core, row, gang, priority, ownOpen)
		if dra != nil {
			if !dra.plans(row) {
				continue
			}
			draNode(core, &pn, row, gang, ownOpen, dra)
		}
		if channels != nil {
			others := row.booked
			if ownOpen {
				others = core.HeldOn(row.name, gang)
			}
			channelNode(&pn, channels[row.name], others)
		}
		nodes = append(nodes, pn)
	}
	if moved {
		v.rows.reindex(nodeInfos)
	}
	bufs.nodes, bufs.ptrs = nodes, bufs.ptrs[:len(nodes)]
	for i := range nodes {
		bufs.ptrs[i] = &nodes[i]
	}
	snap.Nodes = bufs.ptrs
	v.rows.lend(snap, bufs)
	doneDRA()
	v.rows.mu.Unlock()
	v.held.UnlockCore()
	v.gpus.mu.RUnlock()
	tree, err := v.trees.get(nodeInfos, v.config.Levels, sameNodes)
	if err != nil {
		return nil, err
	}
	snap.Tree = tree
	if snap.Rater, err = v.trees.rater(tree, nodeInfos, v.config); err != nil {
		return nil, err
	}
	return snap, nil
}

// CanHost reports whether pod may run on node at all: the node is
// schedulable, and the pod tolerates its NoSchedule and NoExecute taints
// and matches its required node affinity (the pod's, computed once by the
// caller).
func CanHost(node *v1.Node, pod *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity) bool {
	if node.Spec.Unschedulable {
		return false
	}
	if hostTaints(node) && !toleratesHostTaints(node, pod) {
		return false
	}
	ok, _ := affinity.Match(node)
	return ok
}

// hostTaints reports whether node has a taint that keeps pods off it
// (NoSchedule or NoExecute).
func hostTaints(node *v1.Node) bool {
	for i := range node.Spec.Taints {
		if isHostTaint(&node.Spec.Taints[i]) {
			return true
		}
	}
	return false
}

func isHostTaint(t *v1.Taint) bool {
	return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
}

func toleratesHostTaints(node *v1.Node, pod *v1.Pod) bool {
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(node.Spec.Taints, pod.Spec.Tolerations, isHostTaint)
	return !untolerated
}

// hostCheck is CanHost for one pod over snapshot rows, which keep each
// node's unschedulable flag and whether it has host taints. Reading those
// from the v1.Node itself was the costliest line of a 25,000-node plan:
// the first touch of each Node object is a cache miss. Only a tainted node,
// or a pod with required node affinity, reads the Node.
type hostCheck struct {
	pod      *v1.Pod
	affinity nodeaffinity.RequiredNodeAffinity
	// anyNode says the pod has no required node affinity: no node's labels
	// need reading (GetRequiredNodeAffinity matches every node then).
	anyNode bool
}

func newHostCheck(pod *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity) hostCheck {
	required := pod.Spec.Affinity != nil && pod.Spec.Affinity.NodeAffinity != nil &&
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
	return hostCheck{pod: pod, affinity: affinity, anyNode: len(pod.Spec.NodeSelector) == 0 && !required}
}

// admits is CanHost(row.node, pod, affinity), for a row refreshRow has
// brought up to date.
func (c hostCheck) admits(row *snapshotRow) bool {
	if row.unschedulable {
		return false
	}
	if row.hostTainted && !toleratesHostTaints(row.node, c.pod) {
		return false
	}
	if c.anyNode {
		return true
	}
	ok, _ := c.affinity.Match(row.node)
	return ok
}

// treeCache keeps the domain tree of all nodes between plans: building it
// for 5,000 nodes costs several milliseconds, while node labels change
// rarely. A fingerprint of node names and level labels says when to rebuild.
type treeCache struct {
	mu          sync.Mutex
	fingerprint uint64
	tree        *topology.Tree
	// nodes and levels are what fingerprint was computed from. Informer
	// objects are never changed in place, so the same node objects in the
	// same order have the same fingerprint: checking that costs a pointer
	// comparison per node, not a hash of its name and labels.
	nodes  []*v1.Node
	levels []topology.Level
	// rating is the Rater of ratedTree, which rates every plan on it: it
	// counts each level's nodes per profile once per tree and caches the
	// reference estimates.
	rating    *topology.Rater
	ratedTree *topology.Tree
}

// rater returns the Rater of tree, built from nodeInfos' profile labels
// (topology.ProfileFromLabels) when tree is new. The tree fingerprint covers
// those labels, so a changed profile makes a new tree.
func (c *treeCache) rater(tree *topology.Tree, nodeInfos []fwk.NodeInfo, cfg lockstep.TopologyConfig) (*topology.Rater, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rating != nil && c.ratedTree == tree {
		return c.rating, nil
	}
	profiles := make(map[string]string, len(nodeInfos))
	for _, ni := range nodeInfos {
		if node := ni.Node(); node != nil {
			if p, ok := topology.ProfileFromLabels(node.Labels); ok {
				profiles[node.Name] = p.Name
			}
		}
	}
	r, err := topology.NewRater(cfg, tree, func(n string) string { return profiles[n] }, placement.DefaultMessageBytes)
	if err != nil {
		return nil, fmt.Errorf("building the placement rater: %w", err)
	}
	c.rating, c.ratedTree = r, tree
	return r, nil
}

// get returns the tree of nodeInfos' nodes on levels. unchanged says the
// caller saw the same Node objects in the same positions as in its last
// call, which saves comparing them again (a cache miss per node at 25,000
// nodes); false has them compared.
func (c *treeCache) get(nodeInfos []fwk.NodeInfo, levels []topology.Level, unchanged bool) (*topology.Tree, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tree != nil && unchanged && len(nodeInfos) == len(c.nodes) && slices.Equal(levels, c.levels) {
		return c.tree, nil
	}
	if c.tree != nil && c.sameNodes(nodeInfos, levels) {
		return c.tree, nil
	}
	fp := treeFingerprint(nodeInfos, levels)
	if c.tree == nil || c.fingerprint != fp {
		labels := make([]topology.NodeLabels, 0, len(nodeInfos))
		for _, ni := range nodeInfos {
			if node := ni.Node(); node != nil {
				labels = append(labels, topology.NodeLabels{Name: node.Name, Labels: node.Labels})
			}
		}
		tree, err := topology.NewTree(levels, labels)
		if err != nil {
			// No tree for these nodes: the next call must not take the
			// last one for theirs, however unchanged they are.
			c.tree, c.nodes = nil, c.nodes[:0]
			return nil, fmt.Errorf("building the domain tree: %w", err)
		}
		c.fingerprint, c.tree = fp, tree
	}
	c.nodes = c.nodes[:0]
	for _, ni := range nodeInfos {
		c.nodes = append(c.nodes, ni.Node())
	}
	c.levels = slices.Clone(levels)
	return c.tree, nil
}

// sameNodes reports whether nodeInfos hold the node objects, and levels
// the levels, that c.fingerprint was computed from.
func (c *treeCache) sameNodes(nodeInfos []fwk.NodeInfo, levels []topology.Level) bool {
	if len(nodeInfos) != len(c.nodes) || !slices.Equal(levels, c.levels) {
		return false
	}
	for i, ni := range nodeInfos {
		if ni.Node() != c.nodes[i] {
			return false
		}
	}
	return true
}

// treeFingerprint hashes node names, their level and profile label values with
// FNV-1a, without allocating.
func treeFingerprint(nodeInfos []fwk.NodeInfo, levels []topology.Level) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime
		}
		h ^= 0xff // separator, so "ab"+"c" differs from "a"+"bc"
		h *= prime
	}
	for _, ni := range nodeInfos {
		node := ni.Node()
		if node == nil {
			continue
		}
		add(node.Name)
		for _, l := range levels {
			add(node.Labels[l.LabelKey])
		}
		// The profile labels, for the Rater built on the tree.
		add(node.Labels[lockstep.LabelProfile])
		add(node.Labels[lockstep.LabelGPUProduct])
		add(node.Labels[lockstep.LabelNVIDIAGPUProduct])
	}
	return h
}

// snapshotRows keeps, per position of the scheduler's node list, what the
// last plan read about that node: its resources from the NodeInfo and a
// pointer to its GPU index entry. A plan on 5,000 nodes otherwise spent
// most of its time in map lookups (ScalarResources twice and the GPU index
// once per node), each a cache miss. A row is valid while the position
// holds the same NodeInfo at the same generation with the same Node
// object, and while the GPU index's epoch is unchanged; the scheduler keeps
// its snapshot's NodeInfos and their order between cycles and bumps a
// NodeInfo's generation on every change.
//
// A row also keeps what the books take from its node for any gang
// (Books.Booked) and the gang it is drained for, valid until the books
// journal a change of the node (Books.Changes): reading them per node per
// plan was most of a snapshot's cost at 25,000 nodes, while a plan changes
// the books of its gang's nodes only.
type snapshotRows struct {
	mu    sync.Mutex
	epoch uint64
	rows  []snapshotRow
	// at is the row each node was last seen in, to find the rows of nodes
	// the books journal.
	at map[string]int
	// journal is the books' journal position the rows have caught up to.
	journal uint64
	// lent is the last snapshot taken, with its node arrays (lentNodes),
	// and spare the arrays of one its plan is done with (recycle).
	lent      *placement.Snapshot
	lentNodes snapshotNodes
	spare     snapshotNodes
}

// snapshotNodes are a snapshot's planner nodes and the pointers to them
// that Snapshot.Nodes holds.
type snapshotNodes struct {
	nodes []placement.Node
	ptrs  []*placement.Node
}

// take returns node arrays for n nodes: the spare ones when they are big
// enough, which are then no longer spare. The caller holds r.mu.
func (r *snapshotRows) take(n int) snapshotNodes {
	bufs := r.spare
	r.spare = snapshotNodes{}
	if cap(bufs.nodes) < n {
		bufs = snapshotNodes{nodes: make([]placement.Node, 0, n), ptrs: make([]*placement.Node, n)}
	}
	return bufs
}

// lend records that snap holds bufs. Only the last snapshot taken can be
// recycled: an earlier one that is not is left to the garbage collector.
// The caller holds r.mu.
func (r *snapshotRows) lend(snap *placement.Snapshot, bufs snapshotNodes) {
	r.lent, r.lentNodes = snap, bufs
}

// recycle gives the node arrays of snap to the next snapshot. The caller
// must be done with snap and everything it holds: only plan calls it, once
// Decide has returned, whose Decision names nodes by name and domains of
// the tree, never a snapshot node.
func (r *snapshotRows) recycle(snap *placement.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lent == snap {
		r.spare, r.lent, r.lentNodes = r.lentNodes, nil, snapshotNodes{}
	}
}

type snapshotRow struct {
	info       fwk.NodeInfo
	generation int64
	node       *v1.Node
	// name is node.Name, read here without touching the Node object.
	name string
	// gpus is nil for a node without a NodeTopology in the index.
	gpus *nodeGPUs

	gpuCount, usedGPUs    int
	freeMilliCPU, freeMem int64
	freePods              int
	// unschedulable and hostTainted are node's Spec.Unschedulable and
	// hostTaints(node), for hostCheck.
	unschedulable, hostTainted bool

	// booksRead says booked and drainedFor are the books' answers for
	// node: false for a new row and once the books journal the node.
	booksRead  bool
	booked     topology.GPUSet
	drainedFor string

	// dra is the node's pool in the deviceView draOf at its epoch draEpoch
	// (draView.plans), nil for a node that publishes none.
	dra      *devicePool
	draOf    *deviceView
	draEpoch uint64
}

// align returns n rows, all of them stale if the GPU index's epoch moved
// since the last plan (an entry was added or removed, rare next to plans).
// The caller holds r.mu and the GPU index for reading.
func (r *snapshotRows) align(n int, epoch uint64) []snapshotRow {
	if len(r.rows) != n || r.epoch != epoch || r.at == nil {
		r.rows, r.epoch, r.at = make([]snapshotRow, n), epoch, make(map[string]int, n)
	}
	return r.rows
}

// catchUp marks the rows of the nodes the books changed since the last
// plan for reading again, or every row when the journal no longer reaches
// back that far. The caller holds r.mu and the books, after align.
func (r *snapshotRows) catchUp(books *placement.Books) {
	changed, next, complete := books.Changes(r.journal)
	r.journal = next
	if !complete {
		for i := range r.rows {
			r.rows[i].booksRead = false
		}
		return
	}
	for _, name := range changed {
		if i, ok := r.at[name]; ok {
			r.rows[i].booksRead = false
		}
	}
}

// misplaced reports whether row is not yet the row of node's NodeInfo (new, or
// the scheduler added, removed or reordered nodes): at must then be
// rebuilt (reindex).
func (row *snapshotRow) misplaced(ni fwk.NodeInfo, node *v1.Node) bool {
	// The same Node object has the same name: compared first, the names
	// are read only when the object changed.
	return row.info != ni || row.node == nil || (row.node != node && row.node.Name != node.Name)
}

// reindex rebuilds at after a plan that moved nodes between rows. Rows
// that do not hold their position's NodeInfo (nodes this plan left out,
// whose rows still hold what was there before) are emptied, so no node has
// two rows and each journaled node finds the one it is read from. The
// caller holds r.mu.
func (r *snapshotRows) reindex(nodeInfos []fwk.NodeInfo) {
	clear(r.at)
	for i := range r.rows {
		row := &r.rows[i]
		if row.node == nil || row.info != nodeInfos[i] {
			*row = snapshotRow{}
			continue
		}
		r.at[row.node.Name] = i
	}
}

// refreshRow brings row up to date with node and its NodeInfo where either
// changed. The caller holds v.gpus for reading and v.rows, after misplaced.
func (v *View) refreshRow(row *snapshotRow, ni fwk.NodeInfo, node *v1.Node) {
	if row.info == ni && row.node == node && row.generation == ni.GetGeneration() {
		return
	}
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	*row = snapshotRow{
		info: ni, generation: ni.GetGeneration(), node: node, name: node.Name,
		gpus:          v.gpus.nodes[node.Name],
		gpuCount:      int(alloc.GetScalarResources()[lockstep.GPUResource]),
		usedGPUs:      int(used.GetScalarResources()[lockstep.GPUResource]),
		freeMilliCPU:  alloc.GetMilliCPU() - used.GetMilliCPU(),
		freeMem:       alloc.GetMemory() - used.GetMemory(),
		freePods:      alloc.GetAllowedPodNumber() - len(ni.GetPods()),
		unschedulable: node.Spec.Unschedulable,
		hostTainted:   hostTaints(node),
	}
}

// plannerNode describes one node for the planner from its row (refreshRow),
// reading the books again where they changed the node. ownOpen says gang
// has open slots in the books, which it may plan onto again. The caller
// holds the view's GPU index for reading, the books (core) and the rows.
func plannerNode(core *placement.Books, row *snapshotRow, gang string, priority int32, ownOpen bool) placement.Node {
	pn := placement.Node{
		Name:         row.name,
		FreeMilliCPU: row.freeMilliCPU,
		FreeMemory:   row.freeMem,
		FreePods:     row.freePods,
	}
	free := topology.AllGPUs(min(row.gpuCount, topology.MaxGPUs))
	if gpus := row.gpus; gpus != nil {
		pn.Topology, pn.Selector, free = gpus.topology, gpus.selector, gpus.free
	}
	if !row.booksRead {
		row.booked, row.drainedFor, row.booksRead = core.Booked(row.name), core.DrainedFor(row.name), true
	}
	if ownOpen {
		free &^= core.HeldOn(row.name, gang)
	} else {
		free &^= row.booked
	}
	pn.Drained = row.drainedFor != "" && core.KeptOff(row.name, gang, priority) != ""
	// GPUs taken by pods the agent has not reported yet are known only by
	// count; drop the highest-indexed free GPUs to match it.
	for free.Len() > max(row.gpuCount-row.usedGPUs, 0) {
		free &^= topology.GPUSet(1) << (63 - bits.LeadingZeros64(uint64(free)))
	}
	pn.FreeGPUs = free
	return pn
}
