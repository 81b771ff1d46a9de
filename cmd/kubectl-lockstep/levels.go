package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
)

// levelFlags choose the topology configuration: --levels, a configuration
// file (the scheduler's, or a TopologyConfig), or the defaults the scheduler
// also falls back to.
type levelFlags struct {
	levels         string
	topologyConfig string
}

func (f *levelFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.levels, "levels", "", "topology levels, narrowest first, as name=nodeLabelKey pairs: leaf=fabric.topograph.run/tier-0,spine=fabric.topograph.run/tier-1 (default: clique, leaf, spine and block from topograph and GPU feature discovery labels)")
	cmd.Flags().StringVar(&f.topologyConfig, "topology-config", "", "read the levels and oversubscription from this file: the scheduler's KubeSchedulerConfiguration (TopologyPlacement args) or a TopologyConfig")
	cmd.MarkFlagsMutuallyExclusive("levels", "topology-config")
}

func (f *levelFlags) resolve() (lockstep.TopologyConfig, error) {
	if f.levels != "" {
		levels, err := parseLevels(f.levels)
		if err != nil {
			return lockstep.TopologyConfig{}, err
		}
		return lockstep.TopologyConfig{Levels: levels}, nil
	}
	return topologyconfig.LoadOrDefault(f.topologyConfig)
}

// parseLevels reads "name=key,name=key".
func parseLevels(s string) ([]lockstep.Level, error) {
	var levels []lockstep.Level
	for _, pair := range strings.Split(s, ",") {
		name, key, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || name == "" || key == "" {
			return nil, fmt.Errorf("--levels: %q is not name=nodeLabelKey", pair)
		}
		levels = append(levels, lockstep.Level{Name: name, LabelKey: key})
	}
	if errs := topologyconfig.Validate(lockstep.TopologyConfig{Levels: levels}, nil); len(errs) > 0 {
		return nil, fmt.Errorf("--levels: %w", errs.ToAggregate())
	}
	return levels, nil
}
