// Package capacity adds up nodes' GPUs over the domain tree: how many each
// domain has, how many are free and how many are unhealthy. It is what
// `kubectl lockstep topology` prints; listing Nodes, pods and NodeTopology
// objects is the caller's job, so this package takes plain numbers.
package capacity

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Node is one node's GPUs as the scheduler counts them.
type Node struct {
	Name   string
	Labels map[string]string
	// Allocatable is the node's allocatable nvidia.com/gpu.
	Allocatable int
	// Requested is the sum of the GPU requests of the non-terminated pods
	// bound to the node.
	Requested int
	// Reported is what the node's NodeTopology says; nil without one.
	Reported *Reported
}

// Reported is a NodeTopology's view of a node's GPUs.
type Reported struct {
	// Usable counts the GPUs that are healthy and held by no pod.
	Usable int
	// Unhealthy counts the GPUs listed in status.gpuHealth.
	Unhealthy int
}

// Free is the number of GPUs the scheduler can still hand out on the node:
// allocatable minus requested, and no more than the NodeTopology's usable
// GPUs, since the scheduler picks GPU sets among those.
func (n Node) Free() int {
	free := max(0, n.Allocatable-n.Requested)
	if n.Reported != nil {
		free = min(free, max(0, n.Reported.Usable))
	}
	return free
}

// Domain is a domain of the tree with the GPUs of the nodes below it.
type Domain struct {
	// ID is the domain's path from the widest level, e.g.
	// "spine=s1/leaf=l2"; the root's is "cluster".
	ID string `json:"id"`
	// Level is the level's name: host, a configured level, or cluster.
	Level string `json:"level"`
	// Name is the label value, the node name for a host, or "(node)" for a
	// node that lacks the level's label while other nodes have it.
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
	GPUs  int    `json:"gpus"`
	Free  int    `json:"free"`
	// Unhealthy is nil when no node below has a NodeTopology.
	Unhealthy *int      `json:"unhealthy,omitempty"`
	Children  []*Domain `json:"children,omitempty"`
}

// Tree is the domain tree of a set of nodes with their GPUs.
type Tree struct {
	// Levels are the levels that exist, narrowest first: host, the
	// configured levels some node is labelled for, cluster.
	Levels []string
	Root   *Domain

	configured []topology.Level
	byLevel    map[string][]*Domain
	paths      map[string][]*Domain
}

// Build returns the tree of nodes over levels (narrowest first, without the
// implicit host and cluster levels). Levels no node is labelled for are left
// out, so every domain shown groups nodes by a real label.
func Build(levels []topology.Level, nodes []Node) (*Tree, error) {
	labelled := make([]topology.NodeLabels, len(nodes))
	byName := make(map[string]Node, len(nodes))
	for i, n := range nodes {
		labelled[i] = topology.NodeLabels{Name: n.Name, Labels: n.Labels}
		byName[n.Name] = n
	}
	tt, err := topology.NewTree(levels, labelled)
	if err != nil {
		return nil, err
	}
	t := &Tree{
		configured: slices.Clone(levels),
		byLevel:    map[string][]*Domain{},
		paths:      make(map[string][]*Domain, len(nodes)),
	}
	t.Root = t.convert(tt.Root(), nil, byName)
	names := tt.LevelNames()
	for i, name := range names {
		if i == 0 || i == len(names)-1 || len(t.byLevel[name]) > 0 {
			t.Levels = append(t.Levels, name)
		}
	}
	return t, nil
}

// convert copies d and what lies below it, skipping the pass-through domains
// of absent levels, and adds up the GPUs of its nodes. path holds the
// domains above d, widest first.
func (t *Tree) convert(d *topology.Domain, path []*Domain, nodes map[string]Node) *Domain {
	out := &Domain{ID: displayID(d.ID), Level: d.LevelName, Name: d.Value, Nodes: len(d.Nodes)}
	if d.Synthetic {
		out.Name = "(" + d.Value + ")"
	}
	if d.Parent == nil {
		out.Name = lockstep.LevelCluster
	}
	t.byLevel[out.Level] = append(t.byLevel[out.Level], out)
	path = append(path, out)
	if d.Level == 0 {
		n := nodes[d.Value]
		out.GPUs, out.Free = n.Allocatable, n.Free()
		if n.Reported != nil {
			out.Unhealthy = &n.Reported.Unhealthy
		}
		t.paths[d.Value] = slices.Clone(path)
		return out
	}
	for _, c := range visible(d.Children) {
		child := t.convert(c, path, nodes)
		out.Children = append(out.Children, child)
		out.GPUs += child.GPUs
		out.Free += child.Free
		if child.Unhealthy != nil {
			sum := *child.Unhealthy
			if out.Unhealthy != nil {
				sum += *out.Unhealthy
			}
			out.Unhealthy = &sum
		}
	}
	return out
}

// visible replaces the pass-through domains of absent levels, which hold
// the same nodes as their parent, by their children.
func visible(children []*topology.Domain) []*topology.Domain {
	var out []*topology.Domain
	for _, c := range children {
		if c.Synthetic && c.Value == "" && c.Level > 0 {
			out = append(out, visible(c.Children)...)
			continue
		}
		out = append(out, c)
	}
	return out
}

// displayID drops the "level=()" segments of absent levels from an ID.
func displayID(id string) string {
	parts := strings.Split(id, "/")
	kept := parts[:0]
	for _, p := range parts {
		if !strings.HasSuffix(p, "=()") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "/")
}

// Truncate returns a copy of the tree's root with the domains more than
// depth levels below it left out (their GPUs still count in the domains
// above). A negative depth keeps everything.
func (t *Tree) Truncate(depth int) *Domain {
	return truncate(t.Root, depth)
}

func truncate(d *Domain, depth int) *Domain {
	out := *d
	out.Children = nil
	if depth == 0 {
		return &out
	}
	for _, c := range d.Children {
		out.Children = append(out.Children, truncate(c, depth-1))
	}
	return &out
}

// AtLevel returns the domains of the named level, without their children,
// sorted by ID.
func (t *Tree) AtLevel(name string) ([]*Domain, error) {
	if !slices.Contains(t.Levels, name) {
		if l, ok := (lockstep.TopologyConfig{Levels: t.configured}).Level(name); ok {
			return nil, fmt.Errorf("no node is labelled for level %q (label %s)", name, l.LabelKey)
		}
		return nil, fmt.Errorf("unknown level %q: the levels are %s", name, strings.Join(t.Levels, ", "))
	}
	var out []*Domain
	for _, d := range t.byLevel[name] {
		flat := *d
		flat.Children = nil
		out = append(out, &flat)
	}
	slices.SortFunc(out, func(a, b *Domain) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Path returns the domains of a node from its host up to the root, nil for
// a node not in the tree.
func (t *Tree) Path(node string) []*Domain {
	path := t.paths[node]
	out := make([]*Domain, 0, len(path))
	for i := len(path) - 1; i >= 0; i-- {
		out = append(out, path[i])
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
