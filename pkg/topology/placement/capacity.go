package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Clique states of a domain (domain.clique); NVLink domains get ids from 0.
const (
	// noNodes: no node below can take a member yet.
	noNodes int32 = -1
	// mixed: the nodes below that can take a member do not all share one
	// multi-node NVLink domain, so a ring between them uses the NICs.
	mixed int32 = -2
)

// domain is one tree domain in the planner's flat pre-order copy of the tree,
// with the free capacity of the snapshot's nodes below it. Flat arrays and
// int32 indices keep the per-call work to a few allocations and no maps.
type domain struct {
	d *topology.Domain
	// node is the index in Snapshot.Nodes of a host's node; -1 for every
	// other domain and for hosts not in the snapshot.
	node int32
	// kidLo and kidHi delimit the domain's children in planner.kids; end
	// is one past its subtree in planner.doms.
	kidLo, kidHi, end int32
	// free is the number of free GPUs below; set is a host's free GPUs,
	// clipped to the GPUs its topology has.
	free int
	set  topology.GPUSet
	// room is how many members fit below: per node, the least of what its
	// GPUs, CPU, memory and pod slots allow, capped at the gang size.
	room int
	// ever is room as it would be with every GPU of the nodes below free:
	// each node counts the GPUs of its topology (its free ones when it has
	// none). CPU, memory and pod slots count as free now, because the
	// snapshot carries no totals for them. It is at least room, and tells
	// a Preferred gang which levels are worth waiting for.
	ever int
	// intra, nic and fabric are the lowest, over the nodes below that can
	// take a member, of the weakest link within a member's best GPU set, of
	// a GPU's share of its NICs, and of the multi-node NVLink bandwidth:
	// a placement-free proxy of the ring bandwidth for tie-breaks.
	intra, nic, fabric float64
	// clique is the NVLink domain id shared by every such node, or noNodes
	// or mixed.
	clique int32
	// drained counts the nodes below drained for other gangs
	// (Node.Drained).
	drained int32
}

// add folds child c's capacity into d.
func (d *domain) add(c *domain) {
	d.free += c.free
	d.room += c.room
	d.ever += c.ever
	d.drained += c.drained
	if c.room == 0 {
		return
	}
	d.intra = min(d.intra, c.intra)
	d.nic = min(d.nic, c.nic)
	d.fabric = min(d.fabric, c.fabric)
	switch d.clique {
	case noNodes:
		d.clique = c.clique
	case c.clique:
	default:
		d.clique = mixed
	}
}

// bandwidth is the proxy per-GPU bandwidth of a ring spanning nodes below d:
// NVLink when they share a clique, else the NICs, and never more than the
// links within a member.
func (d *domain) bandwidth() float64 {
	inter := d.nic
	if d.clique >= 0 {
		inter = d.fabric
	}
	return min(d.intra, inter)
}

// planner is one Place call: the snapshot aggregated over the tree, then
// the members placed.
type planner struct {
	s   *Snapshot
	req request
	// sk is the skeleton of s.Tree, which doms copies.
	sk *skeleton
	// doms is the tree in pre-order: doms[0] is the root and every subtree
	// is contiguous, so "the nodes below d" is a slice.
	doms []domain
	kids []int32
	// cliques numbers the multi-node NVLink domains met. Its buckets are
	// reused from plan to plan with doms (planBuffers): a cluster of
	// thousands of racks would otherwise grow a new map per plan.
	cliques map[topology.NVLinkDomain]int32
	// lastClique is the clique clique numbered last, and lastCliqueID its
	// id (-1 before the first): hosts come in tree order, where a rack's
	// trays are neighbours, so most lookups are the last one again and
	// skip hashing the cluster UUID (6% of a 25,000-node plan's time).
	lastClique   topology.NVLinkDomain
	lastCliqueID int32
	// lastPick is the last answer of quality; selector and dra are nil
	// before the first (quality is asked only of nodes with a selector or
	// a DRA order). Nodes of one layout share both, so on a cluster of
	// few layouts most nodes reuse it.
	lastPick struct {
		selector *topology.Selector
		dra      *topology.DRAOrder
		oneRoot  bool
		free     topology.GPUSet
		quality  topology.SetQuality
	}
	// scratch holds the ordered children of the domains being placed into,
	// one frame per recursion level.
	scratch []int32
	out     []Assignment
	// used are the nodes of out in order, with their member counts.
	used []usedNode
	// base is the narrowest level at or above req.want where some domain's
	// ever holds the gang; the root's level when none does.
	base int
	// nearLo and nearHi are the lowest and highest host index of the
	// request's Near nodes, nearLo < 0 when there are none: in pre-order,
	// domain i holds them all exactly when i <= nearLo and nearHi < end.
	nearLo, nearHi int32
	// nearHosts are the hosts of the Near nodes (nil without any): the
	// GPUs in use there count as held for good (see initHost).
	nearHosts map[int32]bool
}

type usedNode struct {
	// node indexes Snapshot.Nodes and host planner.doms.
	node, host int32
	members    int
}

// newPlanner copies the tree into flat arrays and aggregates every node's
// room bottom-up: O(domains), at most O(nodes × levels). The flat copy of
// an empty tree (the skeleton) is built once per tree and reused, so a plan
// costs a copy of it, a lookup per node and the aggregation, with no map
// built and no per-node allocation. The aggregation also finds the base
// level of a Preferred gang's widening and settles req with it.
func newPlanner(s *Snapshot, req request) (*planner, error) {
	sk := skeletonOf(s.Tree)
	bufs := sk.clone()
	p := &planner{
		s:       s,
		req:     req,
		sk:      sk,
		doms:    bufs.doms,
		cliques: bufs.cliques,
		kids:    sk.kids, // read-only
		base:    s.Tree.Root().Level,
	}
	p.nearLo, p.nearHi, p.lastCliqueID = -1, -1, -1
	for _, name := range req.near {
		if h, ok := sk.hosts[name]; ok {
			if p.nearLo < 0 || h < p.nearLo {
				p.nearLo = h
			}
			p.nearHi = max(p.nearHi, h)
			if p.nearHosts == nil {
				p.nearHosts = map[int32]bool{}
			}
			p.nearHosts[h] = true
		}
	}
	// Match snapshot nodes to hosts: by the last plan's order while the
	// names are the same (the same strings, so a pointer comparison), else
	// by name. Errors (nil, duplicate and unknown nodes) are reported as
	// checkNodes words them, in node order.
	last := sk.order.Load()
	if last != nil && len(last.names) != len(s.Nodes) {
		last = nil
	}
	var order *nodeOrder
	for i, n := range s.Nodes {
		if n == nil {
			p.release()
			return nil, checkNodes(s)
		}
		var h int32
		if last != nil && last.names[i] == n.Name {
			h = last.hosts[i]
		} else {
			var ok bool
			if h, ok = sk.hosts[n.Name]; !ok {
				p.release()
				return nil, checkNodes(s)
			}
			if order == nil {
				order = &nodeOrder{names: make([]string, len(s.Nodes)), hosts: make([]int32, len(s.Nodes))}
				for j := range i {
					order.names[j], order.hosts[j] = last.names[j], last.hosts[j]
				}
			}
		}
		if p.doms[h].node >= 0 {
			p.release()
			return nil, checkNodes(s)
		}
		p.doms[h].node = int32(i)
		if order != nil {
			order.names[i], order.hosts[i] = n.Name, h
		}
	}
	if order != nil {
		sk.order.Store(order)
	}
	// Hosts in tree order, then every domain bottom-up: in pre-order a
	// domain's children come after it.
	for _, h := range sk.hostOrder {
		if n := p.doms[h].node; n >= 0 {
			p.initHost(h, n)
		}
	}
	for i := int32(len(p.doms)) - 1; i >= 0; i-- {
		d := &p.doms[i]
		for _, c := range p.kids[d.kidLo:d.kidHi] {
			d.add(&p.doms[c])
		}
		p.noteEver(i)
	}
	p.req.settle(p.base, sk.absent)
	return p, nil
}

// holdsNear reports whether domain i holds every Near node; true without
// any.
func (p *planner) holdsNear(i int32) bool {
	return p.nearLo < 0 || (i <= p.nearLo && p.nearHi < p.doms[i].end)
}

// checkNodes returns the error of snapshot nodes that are not one distinct
// node of the tree each: the first nil or repeated node in order, else the
// first node the tree lacks.
func checkNodes(s *Snapshot) error {
	seen := make(map[string]bool, len(s.Nodes))
	for i, n := range s.Nodes {
		if n == nil {
			return fmt.Errorf("nodes[%d] is nil", i)
		}
		if seen[n.Name] {
			return fmt.Errorf("nodes[%d]: node %q is listed twice", i, n.Name)
		}
		seen[n.Name] = true
	}
	for i, n := range s.Nodes {
		if _, ok := s.Tree.Host(n.Name); !ok {
			return fmt.Errorf("nodes[%d]: node %q is not in the snapshot's tree", i, n.Name)
		}
	}
	return errors.New("snapshot nodes do not match the tree's hosts")
}

// skeleton is a tree in the planner's flat pre-order form with no capacity:
// every domain as newPlanner starts it, children indices, and the index of
// every host. It is immutable once built.
type skeleton struct {
	tree      *topology.Tree
	doms      []domain
	kids      []int32
	hosts     map[string]int32
	hostOrder []int32
	// absent marks the tree's levels no node is labelled for
	// (topology.Tree.LevelAbsent): a gang that widens steps over them.
	absent []bool
	// order is the host of every snapshot node of the last plan whose
	// nodes were not all in the order before.
	order atomic.Pointer[nodeOrder]
	// pool recycles planners' buffers.
	pool sync.Pool
}

// nodeOrder is the host index of snapshot nodes by position, keyed by name.
type nodeOrder struct {
	names []string
	hosts []int32
}

// planBuffers are what a planner allocates in proportion to the cluster,
// recycled through its skeleton's pool so that a plan's allocations do not
// grow with it.
type planBuffers struct {
	doms    []domain
	cliques map[topology.NVLinkDomain]int32
}

// clone returns a copy of the skeleton's domains for one planner, and an
// empty clique map, from the pool when it has them; release gives them
// back.
func (sk *skeleton) clone() *planBuffers {
	if bufs, ok := sk.pool.Get().(*planBuffers); ok {
		copy(bufs.doms, sk.doms)
		clear(bufs.cliques)
		return bufs
	}
	return &planBuffers{doms: slices.Clone(sk.doms)}
}

// release returns the planner's buffers to its skeleton's pool. The planner
// must not be used after.
func (p *planner) release() {
	bufs := &planBuffers{doms: p.doms, cliques: p.cliques}
	p.doms, p.cliques = nil, nil
	p.sk.pool.Put(bufs)
}

// lastSkeleton caches the skeleton of the last tree planned on: the
// scheduler plans on one tree until node labels change.
var lastSkeleton atomic.Pointer[skeleton]

func skeletonOf(t *topology.Tree) *skeleton {
	if sk := lastSkeleton.Load(); sk != nil && sk.tree == t {
		return sk
	}
	count := countDomains(t.Root())
	sk := &skeleton{
		tree:  t,
		doms:  make([]domain, 0, count),
		kids:  make([]int32, 0, count-1),
		hosts: make(map[string]int32),
	}
	sk.visit(t.Root())
	for level := range t.LevelNames() {
		sk.absent = append(sk.absent, t.LevelAbsent(level))
	}
	lastSkeleton.Store(sk)
	return sk
}

func countDomains(d *topology.Domain) int {
	n := 1
	for _, c := range d.Children {
		n += countDomains(c)
	}
	return n
}

// visit appends d and its subtree to sk.doms and returns d's index.
func (sk *skeleton) visit(d *topology.Domain) int32 {
	i := int32(len(sk.doms))
	inf := math.Inf(1)
	sk.doms = append(sk.doms, domain{d: d, node: -1, intra: inf, nic: inf, fabric: inf, clique: noNodes})
	if d.Level == 0 {
		sk.hosts[d.Value] = i
		sk.hostOrder = append(sk.hostOrder, i)
		sk.doms[i].end = i + 1
		return i
	}
	lo := int32(len(sk.kids))
	hi := lo + int32(len(d.Children))
	sk.kids = sk.kids[:hi] // capacity is exact: every domain but the root is a child
	for j, c := range d.Children {
		sk.kids[lo+int32(j)] = sk.visit(c)
	}
	sk.doms[i].kidLo, sk.doms[i].kidHi, sk.doms[i].end = lo, hi, int32(len(sk.doms))
	return i
}

// noteEver lowers p.base to domain i's level when i could hold the gang with
// every GPU free, and holds its Near nodes (members placed before), without
// which no domain of that level may take it. A domain narrower than
// req.from counts for from, which contains it.
func (p *planner) noteEver(i int32) {
	if d := &p.doms[i]; d.ever >= p.req.members && p.holdsNear(i) {
		p.base = min(p.base, max(d.d.Level, p.req.from))
	}
}

// initHost fills host i from snapshot node n.
func (p *planner) initHost(i, n int32) {
	node := p.s.Nodes[n]
	free := usableGPUs(node, node.FreeGPUs)
	if node.Drained {
		free = 0
		p.doms[i].drained = 1
	}
	all := free
	if node.Topology != nil {
		all = usableGPUs(node, node.Topology.AllGPUs())
	}
	d := &p.doms[i]
	d.node, d.set, d.free = n, free, free.Len()
	d.room = p.req.room(node, free)
	d.ever = d.room
	if all != free || (p.req.channels && node.Channels != node.FreeChannels) {
		d.ever = p.req.roomEver(node, all)
	}
	if p.nearHosts[i] {
		// The gang's own members placed before hold GPUs here for as long
		// as it runs: what is in use now is never free for the new
		// members. Without this an elastic gang whose first Worker filled
		// its node started the next Workers' search at that full node and
		// waited a preferredWait before widening to the leaf beside it.
		d.ever = d.room
	}
	if d.room == 0 {
		return
	}
	d.clique = mixed
	k := p.req.gpus
	if k == 0 || node.Selector == nil {
		// Nothing to rank by: CPU-only members, or links unknown.
		d.intra, d.nic, d.fabric = 0, 0, 0
		return
	}
	q := p.quality(node, free)
	if k > 1 {
		d.intra = q.BottleneckGBps
	}
	d.nic = q.NICGBpsPerGPU
	if nv := node.Topology.NVLinkDomain; nv != nil {
		d.clique, d.fabric = p.clique(*nv), nv.GBps
	}
}

// quality is the quality of the GPUs pickGPUs would give a member on node
// from free. It depends only on the node's selector, DRA order (never
// changed once made) and free, and in tree order most hosts repeat the
// last host's (a rack of one hardware, all free or all full): that answer
// is kept.
func (p *planner) quality(node *Node, free topology.GPUSet) topology.SetQuality {
	if p.lastPick.selector != node.Selector || p.lastPick.free != free || p.lastPick.dra != node.DRA || p.lastPick.oneRoot != node.DRAOneRoot {
		_, q, _ := pickGPUs(node, free, p.req.gpus)
		p.lastPick.selector, p.lastPick.dra, p.lastPick.oneRoot = node.Selector, node.DRA, node.DRAOneRoot
		p.lastPick.free, p.lastPick.quality = free, q
	}
	return p.lastPick.quality
}

// clique returns the id of a multi-node NVLink domain, ignoring its
// bandwidth, which is not part of its identity.
func (p *planner) clique(nv topology.NVLinkDomain) int32 {
	nv.GBps = 0
	if p.lastCliqueID >= 0 && nv == p.lastClique {
		return p.lastCliqueID
	}
	if p.cliques == nil {
		p.cliques = make(map[topology.NVLinkDomain]int32)
	}
	id, ok := p.cliques[nv]
	if !ok {
		id = int32(len(p.cliques))
		p.cliques[nv] = id
	}
	p.lastClique, p.lastCliqueID = nv, id
	return id
}

// usableGPUs clips set to the GPUs node has: those of its topology and its
// selector; a node without topology has whatever set says.
func usableGPUs(node *Node, set topology.GPUSet) topology.GPUSet {
	if node.Topology != nil {
		set &= node.Topology.AllGPUs()
	}
	if node.Selector != nil {
		set &= topology.AllGPUs(node.Selector.NumGPUs())
	}
	return set
}

// room returns how many members node can take with free GPUs, at most the
// gang size.
func (r *request) room(node *Node, free topology.GPUSet) int {
	return r.roomWith(node, free, node.FreeChannels)
}

// roomEver is room with every GPU of all and every channel free.
func (r *request) roomEver(node *Node, all topology.GPUSet) int {
	return r.roomWith(node, all, node.Channels)
}

func (r *request) roomWith(node *Node, free topology.GPUSet, channels int) int {
	room := min(r.members, max(node.FreePods, 0))
	if r.gpus > 0 {
		room = min(room, free.Len()/r.gpus)
	}
	if r.channels {
		room = min(room, max(channels, 0))
	}
	room = min(room, share(node.FreeMilliCPU, r.milliCPU))
	return min(room, share(node.FreeMemory, r.memory))
}

// share is how many requests of per fit in free, capped to the int range;
// unlimited when per is 0.
func share(free, per int64) int {
	switch {
	case per == 0:
		return math.MaxInt
	case free <= 0:
		return 0
	}
	return int(min(free/per, math.MaxInt32))
}

// pickGPUs returns the best k of free on node: the selector's NVLink-aware
// choice, or the lowest indices when the node has no selector. On a DRA
// node it is the allocator's choice as DRA.Pick predicts it, whatever its
// quality.
func pickGPUs(node *Node, free topology.GPUSet, k int) (topology.GPUSet, topology.SetQuality, bool) {
	if node.DRA != nil {
		set, ok := node.DRA.Pick(free, k, node.DRAOneRoot)
		q := topology.SetQuality{GPUs: set.Len()}
		if node.Selector != nil {
			q = node.Selector.Quality(set)
		}
		return set, q, ok
	}
	if node.Selector != nil {
		if set, q, ok := node.Selector.Best(free, k); ok {
			return set, q, true
		}
	}
	var set topology.GPUSet
	for rest := free; rest != 0 && set.Len() < k; rest &= rest - 1 {
		set |= rest & -rest
	}
	return set, topology.SetQuality{GPUs: set.Len()}, set.Len() == k
}
