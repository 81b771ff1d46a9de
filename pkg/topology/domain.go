package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Level is one configured level of the domain tree; the contract
// (pkg/lockstep) declares it and the default levels.
type Level = lockstep.Level

// NodeLabels is a node's name and labels, the only input the tree needs.
type NodeLabels struct {
	Name   string
	Labels map[string]string
}

// Domain is a group of nodes sharing every level from its own up to the root.
type Domain struct {
	// Level is the tree level: 0 for a host, 1 to len(levels) for the
	// configured levels, len(levels)+1 for the cluster root.
	Level     int
	LevelName string
	// Value is the label value, or the node name for hosts and for
	// synthetic domains.
	Value string
	// Synthetic marks a domain no label names. There are two kinds:
	//
	//   - A node that lacks the level's label (or has it empty) while other
	//     nodes have it is put alone in a domain of its own, valued by its
	//     name: nothing is known about what it shares at that level, so
	//     nothing is assumed, and it meets other nodes only at a wider level
	//     where it has a label, or at the cluster root.
	//   - A level no node has a label for (tier-2 on a two-tier network) is
	//     absent: each domain of the level above has a single pass-through
	//     child with an empty Value, so the levels above still group nodes.
	//     LowestCommonDomain looks past such domains to their parent.
	Synthetic bool
	// ID identifies the domain across the tree: the level=value pairs from
	// the widest level down, e.g. "block=b1/spine=s2/leaf=l7"; a synthetic
	// value is written in parentheses, "(node-name)" or "()" for an absent
	// level, which no label value can contain. The root's ID is "cluster".
	ID       string
	Parent   *Domain
	Children []*Domain
	// Nodes are the names of all nodes below the domain, sorted.
	Nodes []string

	// tier is the network tier a ring climbs to join two nodes whose lowest
	// common domain this is: 0 for a host, 1 for the narrowest network
	// level, one more per network level above; NVLink and absent levels
	// share the tier below them (at least 1).
	tier int
}

// absent reports whether d is the pass-through domain of a level no node is
// labelled for.
func (d *Domain) absent() bool { return d.Synthetic && d.Value == "" }

// widestEquivalent climbs from d past absent-level domains, which hold the
// same nodes as their parent.
func (d *Domain) widestEquivalent() *Domain {
	for d.absent() && d.Parent != nil {
		d = d.Parent
	}
	return d
}

// Tree is the hierarchy of domains over a set of nodes. It is immutable once
// built.
type Tree struct {
	levelNames []string
	root       *Domain
	hosts      map[string]*Domain
	byLevel    [][]*Domain
}

// NewTree builds the domain tree of nodes over levels (narrowest first,
// without the implicit host and cluster levels). Domains are identified by
// their whole path from the root, so a leaf value reused under two spines
// makes two leaves, and the result is always a tree.
func NewTree(levels []Level, nodes []NodeLabels) (*Tree, error) {
	if err := lockstep.ValidateLevels(levels); err != nil {
		return nil, fmt.Errorf("invalid levels: %w", err)
	}
	top := len(levels) + 1
	t := &Tree{
		levelNames: make([]string, top+1),
		hosts:      make(map[string]*Domain, len(nodes)),
		byLevel:    make([][]*Domain, top+1),
	}
	t.levelNames[0] = lockstep.LevelHost
	for i, l := range levels {
		t.levelNames[i+1] = l.Name
	}
	t.levelNames[top] = lockstep.LevelCluster
	present := make([]bool, len(levels))
	for _, node := range nodes {
		for i, l := range levels {
			present[i] = present[i] || node.Labels[l.LabelKey] != ""
		}
	}
	tiers := levelTiers(levels, present)

	t.root = &Domain{Level: top, LevelName: lockstep.LevelCluster, ID: lockstep.LevelCluster, tier: tiers[top]}
	t.byLevel[top] = []*Domain{t.root}
	type childKey struct {
		parent    *Domain
		value     string
		synthetic bool
	}
	children := make(map[childKey]*Domain)
	child := func(parent *Domain, level int, value string, synthetic bool) *Domain {
		key := childKey{parent, value, synthetic}
		if d, ok := children[key]; ok {
			return d
		}
		idValue := value
		if synthetic {
			idValue = "(" + value + ")"
		}
		id := t.levelNames[level] + "=" + idValue
		if parent != t.root {
			id = parent.ID + "/" + id
		}
		d := &Domain{Level: level, LevelName: t.levelNames[level], Value: value, Synthetic: synthetic, ID: id, Parent: parent, tier: tiers[level]}
		children[key] = d
		parent.Children = append(parent.Children, d)
		t.byLevel[level] = append(t.byLevel[level], d)
		return d
	}

	// Visiting nodes by name appends each domain's Nodes already sorted.
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(nodes[a].Name, nodes[b].Name) })
	for _, i := range order {
		node := nodes[i]
		if node.Name == "" {
			return nil, fmt.Errorf("nodes[%d] has no name", i)
		}
		if _, dup := t.hosts[node.Name]; dup {
			return nil, fmt.Errorf("nodes[%d]: node %q is listed twice", i, node.Name)
		}
		d := t.root
		d.Nodes = append(d.Nodes, node.Name)
		for level := len(levels); level >= 1; level-- {
			value := node.Labels[levels[level-1].LabelKey]
			switch {
			case !present[level-1]:
				d = child(d, level, "", true)
			case value == "":
				d = child(d, level, node.Name, true)
			default:
				d = child(d, level, value, false)
			}
			d.Nodes = append(d.Nodes, node.Name)
		}
		host := child(d, 0, node.Name, false)
		host.Nodes = []string{node.Name}
		t.hosts[node.Name] = host
	}

	byID := func(a, b *Domain) int { return strings.Compare(a.ID, b.ID) }
	for _, domains := range t.byLevel {
		slices.SortFunc(domains, byID)
		for _, d := range domains {
			slices.SortFunc(d.Children, byID)
		}
	}
	return t, nil
}

// levelTiers returns the network tier of every tree level (see Domain.tier):
// only labelled, non-NVLink levels are switch tiers.
func levelTiers(levels []Level, present []bool) []int {
	tiers := make([]int, len(levels)+2)
	network := 0
	for i, l := range levels {
		if present[i] && !l.NVLink {
			network++
		}
		tiers[i+1] = max(1, network)
	}
	tiers[len(levels)+1] = network + 1
	return tiers
}

// Root returns the cluster domain.
func (t *Tree) Root() *Domain { return t.root }

// LevelNames returns the names of all levels by index: "host", the configured
// levels, "cluster".
func (t *Tree) LevelNames() []string { return slices.Clone(t.levelNames) }

// LevelAbsent reports whether no node is labelled for level: each of its
// domains is the pass-through child of a domain of the level above, with
// the same nodes, so the level groups nothing its parent does not.
func (t *Tree) LevelAbsent(level int) bool {
	if level < 0 || level >= len(t.byLevel) || len(t.byLevel[level]) == 0 {
		return false
	}
	for _, d := range t.byLevel[level] {
		if !d.absent() {
			return false
		}
	}
	return true
}

// Domains returns the domains of a level sorted by ID; nil for a level out of
// range.
func (t *Tree) Domains(level int) []*Domain {
	if level < 0 || level >= len(t.byLevel) {
		return nil
	}
	return slices.Clone(t.byLevel[level])
}

// Host returns the host domain of a node.
func (t *Tree) Host(node string) (*Domain, bool) {
	d, ok := t.hosts[node]
	return d, ok
}

// Path returns the domains of a node from its host up to the root, or nil for
// an unknown node. Cost estimates take it as a placement member's Path.
func (t *Tree) Path(node string) []*Domain {
	d, ok := t.hosts[node]
	if !ok {
		return nil
	}
	path := make([]*Domain, 0, len(t.levelNames))
	for ; d != nil; d = d.Parent {
		path = append(path, d)
	}
	return path
}

// LowestCommonDomain returns the narrowest domain containing all nodes, never
// the pass-through domain of an absent level.
func (t *Tree) LowestCommonDomain(nodes []string) (*Domain, error) {
	if len(nodes) == 0 {
		return nil, errors.New("no nodes")
	}
	var common *Domain
	for _, name := range nodes {
		d, ok := t.hosts[name]
		if !ok {
			return nil, fmt.Errorf("node %q is not in the tree", name)
		}
		if common == nil {
			common = d
			continue
		}
		// Every host is at level 0 and every path has the same length, so
		// climbing to common's level and then in step meets at the ancestor.
		for d.Level < common.Level {
			d = d.Parent
		}
		for d != common {
			d, common = d.Parent, common.Parent
		}
	}
	return common.widestEquivalent(), nil
}

// LowestCommonLevel returns the level of the narrowest domain containing all
// nodes: how many levels a placement on them spans (0 when they are one host).
func (t *Tree) LowestCommonLevel(nodes []string) (int, error) {
	d, err := t.LowestCommonDomain(nodes)
	if err != nil {
		return 0, err
	}
	return d.Level, nil
}
