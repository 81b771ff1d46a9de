package clustermodel

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Validate checks the model and returns every problem found, each naming the
// field and the fix.
func (m *Model) Validate() field.ErrorList {
	var errs field.ErrorList
	if m.APIVersion != APIVersion {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), m.APIVersion, "set apiVersion: "+APIVersion))
	}
	if m.Kind != Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), m.Kind, "set kind: "+Kind))
	}
	errs = append(errs, m.validateLevels(field.NewPath("levels"))...)
	errs = append(errs, m.validatePools(field.NewPath("pools"))...)
	return errs
}

// validateLevels checks the levels as every component's topology
// configuration is checked (topologyconfig.Validate), plus the model's own
// per-level oversubscription.
func (m *Model) validateLevels(path *field.Path) field.ErrorList {
	levels := m.TopologyConfig().Levels
	errs := topologyconfig.Validate(lockstep.TopologyConfig{Levels: levels}, nil)
	for i, l := range m.Levels {
		if l.Oversubscription < 1 {
			errs = append(errs, field.Invalid(path.Index(i).Child("oversubscription"), l.Oversubscription,
				"must be at least 1 (1 is non-blocking, 2 means 2:1)"))
		}
	}
	return errs
}

func (m *Model) validatePools(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(m.Pools) == 0 {
		return append(errs, field.Required(path, "add at least one node pool"))
	}
	levelIndex := map[string]int{}
	for i, l := range m.Levels {
		levelIndex[l.Name] = i
	}
	poolNames := map[string]int{}
	for i, pool := range m.Pools {
		p := path.Index(i)
		switch {
		case pool.Name == "":
			errs = append(errs, field.Required(p.Child("name"), "give the pool a name; node names are <pool>-<index>"))
		case len(validation.IsDNS1123Label(pool.Name)) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), pool.Name,
				"use lower-case letters, digits and '-' (it becomes part of node names)"))
		default:
			if j, dup := poolNames[pool.Name]; dup {
				errs = append(errs, field.Duplicate(p.Child("name"),
					fmt.Sprintf("%s (also pools[%d]); pools with one name give duplicate node names, rename one", pool.Name, j)))
			}
			poolNames[pool.Name] = i
		}
		if _, ok := topology.LookupProfile(pool.Profile); !ok {
			if pool.Profile == "" {
				errs = append(errs, field.Required(p.Child("profile"), "set one of: "+strings.Join(topology.ProfileNames(), ", ")))
			} else {
				errs = append(errs, field.NotSupported(p.Child("profile"), pool.Profile, topology.ProfileNames()))
			}
		}
		switch pool.GPUDriver {
		case lockstep.GPUDriverDevicePlugin, lockstep.GPUDriverDRA:
		default:
			errs = append(errs, field.NotSupported(p.Child("gpuDriver"), pool.GPUDriver,
				[]string{lockstep.GPUDriverDevicePlugin, lockstep.GPUDriverDRA}))
		}
		if pool.Nodes < 1 {
			errs = append(errs, field.Invalid(p.Child("nodes"), pool.Nodes, "must be at least 1; remove the pool to have none"))
		}
		errs = append(errs, m.validateNesting(p, pool, levelIndex)...)
	}
	return errs
}

// validateNesting checks that a pool's domain sizes cover every required
// level and nest: each wider domain holds whole narrower domains.
func (m *Model) validateNesting(p *field.Path, pool Pool, levelIndex map[string]int) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(pool.NodesPerDomain)) {
		if _, ok := levelIndex[name]; !ok {
			errs = append(errs, field.NotSupported(p.Child("nodesPerDomain").Key(name), name, m.LevelNames()))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pool.FirstDomain)) {
		fp := p.Child("firstDomain").Key(name)
		if _, ok := levelIndex[name]; !ok {
			errs = append(errs, field.NotSupported(fp, name, m.LevelNames()))
		} else if pool.FirstDomain[name] < 0 {
			errs = append(errs, field.Invalid(fp, pool.FirstDomain[name], "must be 0 or more"))
		}
	}
	narrower, narrowerName := 1, "host"
	for _, l := range m.Levels {
		fp := p.Child("nodesPerDomain").Key(l.Name)
		size, ok := pool.NodesPerDomain[l.Name]
		if !ok {
			if !l.Optional {
				errs = append(errs, field.Required(fp,
					fmt.Sprintf("give the number of this pool's nodes in one %s domain (or mark the level optional)", l.Name)))
			}
			continue
		}
		switch {
		case size < 1:
			errs = append(errs, field.Invalid(fp, size, "must be at least 1"))
		case size%narrower != 0:
			errs = append(errs, field.Invalid(fp, size,
				fmt.Sprintf("must be a multiple of the %s size %d so domains nest", narrowerName, narrower)))
		default:
			narrower, narrowerName = size, l.Name
		}
	}
	return errs
}
