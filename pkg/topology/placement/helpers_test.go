package placement

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// diff returns "" when want and got are deeply equal and a "(-want,+got)"
// report otherwise: the stdlib stand-in for cmp.Diff this package may not
// import.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("-want %+v\n+got  %+v", want, got)
}

// withoutDrain returns a copy of u without its Drain, which tests compare
// by ID (drainID), and DrainFree.
func withoutDrain(u *Unschedulable) *Unschedulable {
	c := *u
	c.Drain, c.DrainFree = nil, 0
	return &c
}

// drainID is the DisplayID of u's Drain, "" without one.
func drainID(u *Unschedulable) string {
	if u.Drain == nil {
		return ""
	}
	return u.Drain.DisplayID()
}

// at is where a test node sits: its clique, leaf and spine label values,
// each left out when empty.
type at struct{ clique, leaf, spine string }

func (a at) labels() map[string]string {
	l := map[string]string{}
	for key, v := range map[string]string{
		lockstep.LabelGPUClique:   a.clique,
		lockstep.LabelFabricTier0: a.leaf,
		lockstep.LabelFabricTier1: a.spine,
	} {
		if v != "" {
			l[key] = v
		}
	}
	return l
}

// cluster builds snapshots from built-in profiles, one selector per profile.
type cluster struct {
	t         testing.TB
	nodes     []*Node
	labels    []topology.NodeLabels
	selectors map[string]*topology.Selector
}

func newCluster(t testing.TB) *cluster {
	return &cluster{t: t, selectors: map[string]*topology.Selector{}}
}

// add adds a node of profile with the given free GPUs and ample CPU,
// memory and pod slots, and returns it for the test to adjust. An empty
// profile makes a node without topology.
func (c *cluster) add(name, profile string, free topology.GPUSet, where at) *Node {
	c.t.Helper()
	n := &Node{Name: name, FreeGPUs: free, FreeMilliCPU: 64_000, FreeMemory: 512 << 30, FreePods: 110}
	if profile != "" {
		p, ok := topology.LookupProfile(profile)
		if !ok {
			c.t.Fatalf("no profile %q", profile)
		}
		node, err := p.Node()
		if err != nil {
			c.t.Fatalf("profile %q: %v", profile, err)
		}
		sel, ok := c.selectors[profile]
		if !ok {
			if sel, err = topology.NewSelector(node); err != nil {
				c.t.Fatalf("profile %q: %v", profile, err)
			}
			c.selectors[profile] = sel
		}
		n.Topology, n.Selector = node, sel
		if nv := node.NVLinkDomain; nv != nil && where.clique != "" {
			// Trays of one clique share the NVLink domain their label names.
			id, err := strconv.ParseUint(where.clique, 10, 32)
			if err != nil {
				c.t.Fatalf("node %s: clique %q is not a number", name, where.clique)
			}
			nv.ClusterUUID, nv.CliqueID = "rack", uint32(id)
			where.clique = nv.Label()
		}
	}
	c.nodes = append(c.nodes, n)
	c.labels = append(c.labels, topology.NodeLabels{Name: name, Labels: where.labels()})
	return n
}

// addN adds count nodes named prefix-0, prefix-1, … with all GPUs free.
func (c *cluster) addN(prefix string, count int, profile string, where at) {
	c.t.Helper()
	p, _ := topology.LookupProfile(profile)
	for i := range count {
		c.add(fmt.Sprintf("%s-%d", prefix, i), profile, topology.AllGPUs(p.GPUCount), where)
	}
}

func (c *cluster) snapshot() *Snapshot {
	c.t.Helper()
	tree, err := topology.NewTree(lockstep.DefaultLevels(), c.labels)
	if err != nil {
		c.t.Fatalf("NewTree: %v", err)
	}
	return &Snapshot{Tree: tree, Nodes: c.nodes}
}

// mustPlace runs Place and fails the test on any error.
func mustPlace(t testing.TB, s *Snapshot, g Gang) *Plan {
	t.Helper()
	plan, err := Place(s, g, Options{})
	if err != nil {
		t.Fatalf("Place(%+v): %v", g, err)
	}
	return plan
}

// assign is shorthand for an Assignment.
func assign(node string, gpus ...int) Assignment {
	return Assignment{Node: node, GPUs: topology.NewGPUSet(gpus...)}
}

// nodesOf returns the node of every member, in order.
func nodesOf(plan *Plan) []string {
	out := make([]string, len(plan.Members))
	for i, m := range plan.Members {
		out[i] = m.Node
	}
	return out
}
