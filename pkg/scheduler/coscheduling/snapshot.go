package coscheduling

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// lazySnapshotLister is the scheduler's snapshot as upstream Coscheduling
// gets it (renamingHandle): its NodeInfos' Snapshot is copy on write.
//
// Why. For a PodGroup with minResources that it has not admitted yet,
// upstream's PreFilter (CheckClusterResource) takes every node's
// NodeInfo.Snapshot(), a deep copy of its pods, resources, ports and
// images, to remove the gang's own pods from the copy and read what is left.
// Every TrainingJob PodGroup has minResources, and a single-pod job is a
// gang of its own, so at 5,000 nodes those copies were 16% of the
// scheduler's CPU. A node that holds none of the gang's pods (nearly all of
// them) needs no copy: nothing is removed from it, and reading the node
// itself gives the same answer. lazyNodeInfo copies only when the copy is
// first changed.
type lazySnapshotLister struct {
	framework.SharedLister
	// rows, when set, remembers what List judged of each node between
	// calls; nil judges every node anew.
	rows *listRows
}

func (l lazySnapshotLister) NodeInfos() framework.NodeInfoLister {
	return lazyNodeInfoLister{l.SharedLister.NodeInfos(), l.rows}
}

type lazyNodeInfoLister struct {
	framework.NodeInfoLister
	rows *listRows
}

// listRows keeps, per position of the scheduler's node list, the node's
// copy-on-write wrapper and whether it was untouched, while the position
// holds the same NodeInfo at the same generation (the scheduler bumps a
// NodeInfo's generation on every change to it). Judging every node anew
// iterated two resource maps per node per gang: at 25,200 nodes that was 7%
// of the scale run's CPU. A wrapper is never changed once made, so a list
// handed out earlier stays valid.
type listRows struct {
	mu   sync.Mutex
	rows []listRow
}

type listRow struct {
	info       fwk.NodeInfo
	generation int64
	wrapper    *lazySnapshotNode
	untouched  bool
}

// fit gives r a row per node of a list of n, all new when n changed. The
// caller holds r.mu.
func (r *listRows) fit(n int) {
	if r != nil && len(r.rows) != n {
		r.rows = make([]listRow, n)
	}
}

// judge returns the wrapper of ni, the non-nil node at position i of the
// list r fits, and whether it is untouched. The caller holds r.mu.
func (r *listRows) judge(i int, ni fwk.NodeInfo) (*lazySnapshotNode, bool) {
	if r == nil {
		return &lazySnapshotNode{ni}, untouched(ni)
	}
	row := &r.rows[i]
	if row.info != ni {
		*row = listRow{info: ni, generation: ni.GetGeneration(), wrapper: &lazySnapshotNode{ni}, untouched: untouched(ni)}
	} else if g := ni.GetGeneration(); row.generation != g {
		row.generation, row.untouched = g, untouched(ni)
	}
	return row.wrapper, row.untouched
}

// List returns the snapshot's nodes with a copy-on-write Snapshot, those
// whose extended resources are all free first (untouched).
//
// Why the order. CheckClusterResource subtracts each node's free capacity
// from minResources in list order and stops once nothing is left, so it
// reads as many nodes as it takes to cover the gang. In the scheduler's
// order, a cluster filling up puts its full nodes before its free ones
// (gangs are packed from the front of the topology), and at 25,200 nodes
// each multi-member PodGroup's check read more than half the cluster (23%
// of the 100k-GPU scale run's CPU, docs/benchmarks.md). Whether the
// capacity suffices does not depend on the order: what a node has left is
// never negative, so the sum that covers the request is the same in any
// order (the snapshot's own order is the node tree's, no contract either).
func (l lazyNodeInfoLister) List() ([]fwk.NodeInfo, error) {
	nodes, err := l.NodeInfoLister.List()
	if err != nil {
		return nil, err
	}
	// Untouched nodes fill out from the front, the others from the back,
	// each node judged once; the back is then turned around to keep the
	// scheduler's order.
	out := make([]fwk.NodeInfo, len(nodes))
	front, back := 0, len(nodes)
	if l.rows != nil {
		l.rows.mu.Lock()
		defer l.rows.mu.Unlock()
	}
	l.rows.fit(len(nodes))
	for i, ni := range nodes {
		if ni == nil {
			back--
			continue
		}
		wrapper, free := l.rows.judge(i, ni)
		if free {
			out[front] = wrapper
			front++
		} else {
			back--
			out[back] = wrapper
		}
	}
	slices.Reverse(out[back:])
	return out, nil
}

// untouched reports whether a node has extended resources (GPUs) and none
// of them is requested: it covers a gang's GPUs as far as it can, where a
// node without any (a CPU node) or with some in use covers less. Pods that
// ask for no extended resource (DaemonSets) do not count, so a GPU node
// is untouched in a real cluster too.
func untouched(ni fwk.NodeInfo) bool {
	if len(ni.GetAllocatable().GetScalarResources()) == 0 {
		return false
	}
	for _, n := range ni.GetRequested().GetScalarResources() {
		if n != 0 {
			return false
		}
	}
	return true
}

// lazySnapshotNode is a snapshot NodeInfo whose Snapshot copies on write.
type lazySnapshotNode struct{ fwk.NodeInfo }

func (n *lazySnapshotNode) Snapshot() fwk.NodeInfo { return &lazyNodeInfo{NodeInfo: n.NodeInfo} }

// lazyNodeInfo reads the NodeInfo it was taken from until one of the
// NodeInfo mutators is called, which first replaces it by a real copy.
// TestLazyNodeInfoMutators fails when the NodeInfo interface changes, so a
// new mutator cannot write through to the scheduler's snapshot unnoticed.
type lazyNodeInfo struct {
	fwk.NodeInfo
	copied bool
}

func (n *lazyNodeInfo) own() {
	if !n.copied {
		n.NodeInfo, n.copied = n.NodeInfo.Snapshot(), true
	}
}

func (n *lazyNodeInfo) AddPodInfo(podInfo fwk.PodInfo) {
	n.own()
	n.NodeInfo.AddPodInfo(podInfo)
}

func (n *lazyNodeInfo) RemovePod(logger klog.Logger, pod *v1.Pod) error {
	n.own()
	return n.NodeInfo.RemovePod(logger, pod)
}

func (n *lazyNodeInfo) SetNode(node *v1.Node) {
	n.own()
	n.NodeInfo.SetNode(node)
}
