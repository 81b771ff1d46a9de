// Package clustermodel reads cluster model files: a description of a GPU
// cluster's network tree and node pools that turns into fake Node objects for
// the local test cluster, the demo and the benchmarks. See
// docs/cluster-model.md for the file format.
package clustermodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

const (
	// APIVersion and Kind identify a cluster model file.
	APIVersion = "lockstep.dev/v1alpha1"
	Kind       = "ClusterModel"
)

// Model is a cluster model file.
type Model struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name names the model; it is informational.
	Name string `json:"name"`
	// Levels are the network topology levels above the host, narrowest first.
	Levels []Level `json:"levels"`
	// Pools are groups of identical nodes and where they sit in the tree.
	Pools []Pool `json:"pools"`
}

// Level is one topology level, such as a leaf switch or a spine.
type Level struct {
	// Name is the level's name, e.g. "leaf". Domain label values are derived
	// from it ("leaf-3").
	Name string `json:"name"`
	// NodeLabel is the node label key that carries the node's domain at this
	// level, e.g. "fabric.topograph.run/tier-0".
	NodeLabel string `json:"nodeLabel"`
	// Oversubscription is the bandwidth reduction for traffic that crosses a
	// switch of this level, i.e. runs between two child domains of one domain
	// of this level. 1 means non-blocking; 2 means 2:1. Defaults to 1.
	Oversubscription float64 `json:"oversubscription,omitempty"`
	// Optional levels may be left out by pools whose nodes have no such domain,
	// like a multi-node NVLink clique that only some machines have.
	Optional bool `json:"optional,omitempty"`
}

// Pool is a group of nodes of one hardware profile.
type Pool struct {
	// Name names the pool; node names are "<name>-<index>".
	Name string `json:"name"`
	// Profile is a built-in hardware profile name (pkg/topology).
	Profile string `json:"profile"`
	// Nodes is the number of nodes in the pool.
	Nodes int `json:"nodes"`
	// NodesPerDomain gives, for each level, how many of this pool's nodes fill
	// one domain of that level. Wider levels must hold a whole number of
	// narrower domains so the tree nests.
	NodesPerDomain map[string]int `json:"nodesPerDomain"`
	// FirstDomain places the pool's first domain of a level at that index
	// instead of after the domains of earlier pools, so pools can share a
	// domain (e.g. two pools under spine-0).
	FirstDomain map[string]int `json:"firstDomain,omitempty"`
	// GPUDriver is how the pool's GPUs reach pods: DevicePlugin (the
	// default) has NVIDIA's device plugin advertise nvidia.com/gpu; DRA has
	// NVIDIA's DRA driver publish them as gpu.nvidia.com devices in
	// ResourceSlices, for ResourceClaims, and the nodes advertise no
	// nvidia.com/gpu, as on a node where only the DRA driver runs.
	GPUDriver string `json:"gpuDriver,omitempty"`
}

// DRA reports whether NVIDIA's DRA driver serves the pool's GPUs.
func (p Pool) DRA() bool { return p.GPUDriver == lockstep.GPUDriverDRA }

// WithGPUDriver returns a copy of the model whose every pool's GPUs reach
// pods through driver (lockstep.GPUDriverDevicePlugin or GPUDriverDRA):
// the same nodes in the same tree, so the benchmark can replay one trace on
// one cluster both ways without a second model file to keep in step. The
// copy shares nothing with m.
func (m *Model) WithGPUDriver(driver string) *Model {
	out := *m
	out.Levels = slices.Clone(m.Levels)
	out.Pools = make([]Pool, len(m.Pools))
	for i, p := range m.Pools {
		p.NodesPerDomain = maps.Clone(p.NodesPerDomain)
		p.FirstDomain = maps.Clone(p.FirstDomain)
		p.GPUDriver = driver
		out.Pools[i] = p
	}
	return &out
}

// Marshal writes the model as a model file that Parse reads back.
func (m *Model) Marshal() ([]byte, error) {
	return yaml.Marshal(m)
}

// Load reads, decodes and validates the model file at path. Every error names
// the file and, for invalid content, the field and how to fix it.
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cluster model: %w", err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster model %s: %w", path, err)
	}
	return m, nil
}

// Parse decodes and validates a model. Unknown fields are errors, so a typo
// never silently falls back to a default.
func Parse(data []byte) (*Model, error) {
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(jsonData), []byte("null")) {
		return nil, errors.New("file is empty; see docs/cluster-model.md for the format")
	}
	var m Model
	strictErrs, err := kjson.UnmarshalStrict(jsonData, &m, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, describeDecodeError(err)
	}
	if len(strictErrs) > 0 {
		lines := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			lines[i] = "  " + e.Error() + ": check its spelling against docs/cluster-model.md"
		}
		return nil, fmt.Errorf("fields not in the format:\n%s", strings.Join(lines, "\n"))
	}
	m.setDefaults()
	if errs := m.Validate(); len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = "  " + e.Error()
		}
		return nil, fmt.Errorf("invalid model:\n%s", strings.Join(lines, "\n"))
	}
	return &m, nil
}

func (m *Model) setDefaults() {
	for i := range m.Pools {
		if m.Pools[i].GPUDriver == "" {
			m.Pools[i].GPUDriver = lockstep.GPUDriverDevicePlugin
		}
	}
	for i := range m.Levels {
		if m.Levels[i].Oversubscription == 0 {
			m.Levels[i].Oversubscription = 1
		}
	}
}

// describeDecodeError turns type errors into messages that name the field
// and what it should hold.
func describeDecodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%s: expected a %s, got a %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	return fmt.Errorf("decoding: %w", err)
}

// LevelNames returns the level names, narrowest first.
func (m *Model) LevelNames() []string {
	names := make([]string, len(m.Levels))
	for i, l := range m.Levels {
		names[i] = l.Name
	}
	return names
}

// TopologyConfig is the topology configuration that describes the model's
// cluster to Lockstep: its levels and their oversubscription. A level keyed
// by GPU feature discovery's clique label is the multi-node NVLink level.
func (m *Model) TopologyConfig() lockstep.TopologyConfig {
	var cfg lockstep.TopologyConfig
	for _, l := range m.Levels {
		cfg.Levels = append(cfg.Levels, lockstep.Level{Name: l.Name, LabelKey: l.NodeLabel, NVLink: l.NodeLabel == lockstep.LabelGPUClique})
		if l.Oversubscription > 1 {
			if cfg.Oversubscription == nil {
				cfg.Oversubscription = map[string]float64{}
			}
			cfg.Oversubscription[l.Name] = l.Oversubscription
		}
	}
	return cfg
}

// NodeCount returns the total number of nodes in the model.
func (m *Model) NodeCount() int {
	n := 0
	for _, p := range m.Pools {
		n += p.Nodes
	}
	return n
}
