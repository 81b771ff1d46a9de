package lockstep

import (
	"errors"
	"fmt"
)

// Level names. Host and cluster are implicit in every domain tree (the node
// itself and the root); the others are the default configured levels,
// narrowest first.
const (
	LevelHost    = "host"
	LevelClique  = "clique"
	LevelLeaf    = "leaf"
	LevelSpine   = "spine"
	LevelBlock   = "block"
	LevelCluster = "cluster"
)

// Level is one configured level of the domain tree: domains at that level
// are the groups of nodes sharing a value of the node label.
type Level struct {
	// Name names the level in API objects, constraints and oversubscription,
	// e.g. "leaf". Not "host" or "cluster", which are implicit.
	Name string `json:"name"`
	// LabelKey is the node label whose value names the node's domain.
	LabelKey string `json:"nodeLabel"`
	// NVLink marks a multi-node NVLink level (an NVL72 clique): its domains
	// are joined by NVLink rather than by a switch tier of the network, so it
	// does not count as a network tier in the cost model.
	NVLink bool `json:"nvlink,omitempty"`
}

// DefaultLevels returns the levels read from topograph and GPU feature
// discovery labels, narrowest first: clique, leaf, spine, block. Clouds are a
// matter of other keys, e.g. AWS topology.k8s.aws/network-node-layer-N.
func DefaultLevels() []Level {
	return []Level{
		{Name: LevelClique, LabelKey: LabelGPUClique, NVLink: true},
		{Name: LevelLeaf, LabelKey: LabelFabricTier0},
		{Name: LevelSpine, LabelKey: LabelFabricTier1},
		{Name: LevelBlock, LabelKey: LabelFabricTier2},
	}
}

// TopologyConfig is the topology every component reads: the levels of the
// domain tree and the fabric's oversubscription. It is the TopologyPlacement
// plugin's args (levels, oversubscription) in the scheduler configuration,
// or a file of kind TopologyConfig; pkg/lockstep/topologyconfig loads and
// validates both.
type TopologyConfig struct {
	// Levels are the topology levels above the host, narrowest first.
	// Default: DefaultLevels().
	Levels []Level `json:"levels,omitempty"`
	// Oversubscription by level name (or "cluster" for traffic between the
	// widest domains) for the cost model: 2 for 2:1. Levels not listed are
	// non-blocking.
	Oversubscription map[string]float64 `json:"oversubscription,omitempty"`
}

// DefaultTopologyConfig is the configuration when none is given.
func DefaultTopologyConfig() TopologyConfig {
	return TopologyConfig{Levels: DefaultLevels()}
}

// LevelNames returns the names a constraint may use, narrowest first: host,
// the configured levels, cluster.
func (c TopologyConfig) LevelNames() []string {
	out := make([]string, 0, len(c.Levels)+2)
	out = append(out, LevelHost)
	for _, l := range c.Levels {
		out = append(out, l.Name)
	}
	return append(out, LevelCluster)
}

// Level returns the configured level named name; host and cluster, which
// are implicit, are not among them.
func (c TopologyConfig) Level(name string) (Level, bool) {
	for _, l := range c.Levels {
		if l.Name == name {
			return l, true
		}
	}
	return Level{}, false
}

// LevelLabelled returns the configured level whose domains the node label
// key names.
func (c TopologyConfig) LevelLabelled(key string) (Level, bool) {
	for _, l := range c.Levels {
		if l.LabelKey == key {
			return l, true
		}
	}
	return Level{}, false
}

// HasLevel reports whether a constraint may name level: it is one of
// LevelNames (host, a configured level, cluster). The controller, the
// scheduler and the planner all accept exactly these.
func (c TopologyConfig) HasLevel(name string) bool {
	if name == LevelHost || name == LevelCluster {
		return true
	}
	_, ok := c.Level(name)
	return ok
}

// NVLinkLevel returns the first multi-node NVLink level, if any.
func (c TopologyConfig) NVLinkLevel() (Level, bool) {
	for _, l := range c.Levels {
		if l.NVLink {
			return l, true
		}
	}
	return Level{}, false
}

// ValidateLevels checks what the domain tree needs of levels: distinct,
// non-empty names other than the implicit host and cluster, and distinct,
// non-empty label keys. Errors name the field ("levels[1].name").
// topologyconfig.Validate adds the Kubernetes syntax rules on top.
func ValidateLevels(levels []Level) error {
	var errs []error
	names := make(map[string]bool, len(levels))
	keys := make(map[string]bool, len(levels))
	for i, l := range levels {
		switch {
		case l.Name == "":
			errs = append(errs, fmt.Errorf("levels[%d].name is empty", i))
		case l.Name == LevelHost || l.Name == LevelCluster:
			errs = append(errs, fmt.Errorf("levels[%d].name %q is reserved for the implicit level", i, l.Name))
		case names[l.Name]:
			errs = append(errs, fmt.Errorf("levels[%d].name %q is used twice", i, l.Name))
		}
		names[l.Name] = true
		switch {
		case l.LabelKey == "":
			errs = append(errs, fmt.Errorf("levels[%d].nodeLabel is empty", i))
		case keys[l.LabelKey]:
			errs = append(errs, fmt.Errorf("levels[%d].nodeLabel %q is used twice", i, l.LabelKey))
		}
		keys[l.LabelKey] = true
	}
	return errors.Join(errs...)
}
