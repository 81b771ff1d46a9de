package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// levelFlags choose the topology levels: --levels, the scheduler's
// configuration file, or the defaults the scheduler also falls back to.
type levelFlags struct {
	levels          string
	schedulerConfig string
}

func (f *levelFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.levels, "levels", "", "topology levels, narrowest first, as name=nodeLabelKey pairs: leaf=fabric.topograph.run/tier-0,spine=fabric.topograph.run/tier-1 (default: clique, leaf, spine and block from topograph and GPU feature discovery labels)")
	cmd.Flags().StringVar(&f.schedulerConfig, "scheduler-config", "", "read the levels from the TopologyPlacement args of this KubeSchedulerConfiguration file")
	cmd.MarkFlagsMutuallyExclusive("levels", "scheduler-config")
}

func (f *levelFlags) resolve() ([]topology.Level, error) {
	switch {
	case f.levels != "":
		return parseLevels(f.levels)
	case f.schedulerConfig != "":
		data, err := os.ReadFile(f.schedulerConfig)
		if err != nil {
			return nil, fmt.Errorf("reading the scheduler configuration: %w", err)
		}
		levels, err := levelsFromSchedulerConfig(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.schedulerConfig, err)
		}
		return levels, nil
	}
	return topology.DefaultLevels(), nil
}

// parseLevels reads "name=key,name=key".
func parseLevels(s string) ([]topology.Level, error) {
	var levels []topology.Level
	for _, pair := range strings.Split(s, ",") {
		name, key, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || name == "" || key == "" {
			return nil, fmt.Errorf("--levels: %q is not name=nodeLabelKey", pair)
		}
		levels = append(levels, topology.Level{Name: name, LabelKey: key})
	}
	if err := topology.ValidateLevels(levels); err != nil {
		return nil, fmt.Errorf("--levels: %w", err)
	}
	return levels, nil
}

// schedulerConfig is the part of a KubeSchedulerConfiguration the levels
// come from, with TopologyPlacement's args decoded only as far as their
// levels (the scheduler's Args.Levels): the rest is the scheduler's to check.
type schedulerConfig struct {
	Kind     string `json:"kind"`
	Profiles []struct {
		SchedulerName string `json:"schedulerName"`
		PluginConfig  []struct {
			Name string `json:"name"`
			Args struct {
				Levels []struct {
					Name      string `json:"name"`
					NodeLabel string `json:"nodeLabel"`
					NVLink    bool   `json:"nvlink"`
				} `json:"levels"`
			} `json:"args"`
		} `json:"pluginConfig"`
	} `json:"profiles"`
}

// levelsFromSchedulerConfig returns the levels of the TopologyPlacement args
// of a KubeSchedulerConfiguration, defaulted as the plugin defaults them.
// Profiles that configure the plugin must agree: we print one tree.
func levelsFromSchedulerConfig(data []byte) ([]topology.Level, error) {
	var cfg schedulerConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parsing the KubeSchedulerConfiguration: %w", err)
	}
	if cfg.Kind != "KubeSchedulerConfiguration" {
		return nil, fmt.Errorf("kind is %q, want KubeSchedulerConfiguration", cfg.Kind)
	}
	var (
		found   []topology.Level
		foundIn string
		seen    bool
	)
	for _, p := range cfg.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name != topologyPlacementPlugin {
				continue
			}
			levels := topology.DefaultLevels()
			if len(pc.Args.Levels) > 0 {
				levels = levels[:0]
				for _, l := range pc.Args.Levels {
					levels = append(levels, topology.Level{Name: l.Name, LabelKey: l.NodeLabel, NVLink: l.NVLink})
				}
			}
			if err := topology.ValidateLevels(levels); err != nil {
				return nil, fmt.Errorf("profile %q: %s levels: %w", p.SchedulerName, topologyPlacementPlugin, err)
			}
			if seen && !slices.Equal(levels, found) {
				return nil, fmt.Errorf("profiles %q and %q configure different %s levels; pass the ones you want with --levels", foundIn, p.SchedulerName, topologyPlacementPlugin)
			}
			found, foundIn, seen = levels, p.SchedulerName, true
		}
	}
	if !seen {
		return nil, fmt.Errorf("no profile has %s pluginConfig; leave --scheduler-config out for the default levels", topologyPlacementPlugin)
	}
	return found, nil
}
