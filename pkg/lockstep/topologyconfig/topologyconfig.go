// Package topologyconfig is the one loader and validator of Lockstep's
// topology configuration (lockstep.TopologyConfig): the levels of the domain
// tree and the fabric's oversubscription. The scheduler validates its
// TopologyPlacement args with it; the controller, agent, bench and kubectl
// plugin load the same file with it, so every component sees one tree.
//
// A file is either the scheduler's KubeSchedulerConfiguration, whose
// TopologyPlacement pluginConfig args carry levels and oversubscription (the
// rest of the args is the scheduler's to check), or a file of its own:
//
//	apiVersion: lockstep.dev/v1alpha1
//	kind: TopologyConfig
//	levels:
//	- {name: leaf, nodeLabel: fabric.topograph.run/tier-0}
//	- {name: spine, nodeLabel: fabric.topograph.run/tier-1}
//	oversubscription: {spine: 2}
package topologyconfig

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Kind and APIVersion of a standalone topology configuration file.
const (
	Kind       = "TopologyConfig"
	APIVersion = "lockstep.dev/v1alpha1"
)

// schedulerConfigKind is the kind of the scheduler's configuration file.
const schedulerConfigKind = "KubeSchedulerConfiguration"

// Load reads a configuration file (see the package comment), applies the
// defaults and validates it. Errors name the file and the field.
func Load(path string) (lockstep.TopologyConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return lockstep.TopologyConfig{}, fmt.Errorf("reading the topology configuration: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return lockstep.TopologyConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// LoadOrDefault is Load, or the defaults when path is empty.
func LoadOrDefault(path string) (lockstep.TopologyConfig, error) {
	if path == "" {
		return lockstep.DefaultTopologyConfig(), nil
	}
	return Load(path)
}

// Parse is Load on a file's contents.
func Parse(data []byte) (lockstep.TopologyConfig, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return lockstep.TopologyConfig{}, fmt.Errorf("parsing YAML: %w", err)
	}
	switch head.Kind {
	case Kind:
		if head.APIVersion != APIVersion {
			return lockstep.TopologyConfig{}, field.Invalid(field.NewPath("apiVersion"), head.APIVersion, "must be "+APIVersion)
		}
		var file struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			lockstep.TopologyConfig
		}
		if err := decodeStrict(data, &file); err != nil {
			return lockstep.TopologyConfig{}, err
		}
		return finish(file.TopologyConfig, nil)
	case schedulerConfigKind:
		return fromSchedulerConfig(data)
	default:
		return lockstep.TopologyConfig{}, field.NotSupported(field.NewPath("kind"), head.Kind, []string{Kind, schedulerConfigKind})
	}
}

// fromSchedulerConfig reads the TopologyPlacement args of a
// KubeSchedulerConfiguration. Profiles that configure the plugin must agree:
// a component outside the scheduler sees one tree.
func fromSchedulerConfig(data []byte) (lockstep.TopologyConfig, error) {
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string                  `json:"name"`
				Args lockstep.TopologyConfig `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return lockstep.TopologyConfig{}, fmt.Errorf("parsing the %s: %w", schedulerConfigKind, err)
	}
	var (
		found   lockstep.TopologyConfig
		foundIn string
		seen    bool
	)
	for i, p := range cfg.Profiles {
		for j, pc := range p.PluginConfig {
			if pc.Name != lockstep.TopologyPlacementPlugin {
				continue
			}
			path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
			got, err := finish(pc.Args, path)
			if err != nil {
				return lockstep.TopologyConfig{}, fmt.Errorf("profile %q: %w", p.SchedulerName, err)
			}
			if seen && !reflect.DeepEqual(got, found) {
				return lockstep.TopologyConfig{}, fmt.Errorf("profiles %q and %q configure different %s levels or oversubscription; give the one to use as a file of kind %s", foundIn, p.SchedulerName, lockstep.TopologyPlacementPlugin, Kind)
			}
			found, foundIn, seen = got, p.SchedulerName, true
		}
	}
	if !seen {
		return lockstep.TopologyConfig{}, fmt.Errorf("no profile has %s pluginConfig: add it (its args may be empty for the default levels) or give a file of kind %s", lockstep.TopologyPlacementPlugin, Kind)
	}
	return found, nil
}

// finish defaults and validates a decoded configuration.
func finish(cfg lockstep.TopologyConfig, path *field.Path) (lockstep.TopologyConfig, error) {
	Default(&cfg)
	if errs := Validate(cfg, path); len(errs) > 0 {
		return lockstep.TopologyConfig{}, errs.ToAggregate()
	}
	return cfg, nil
}

// Default fills what a configuration leaves out: the levels default to
// lockstep.DefaultLevels().
func Default(cfg *lockstep.TopologyConfig) {
	if len(cfg.Levels) == 0 {
		cfg.Levels = lockstep.DefaultLevels()
	}
}

// Validate checks a defaulted configuration. Errors are under path (nil for
// a file's top level), e.g. "args.levels[1].nodeLabel".
func Validate(cfg lockstep.TopologyConfig, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]int{}
	keys := map[string]int{}
	levels := path.Child("levels")
	if path == nil {
		levels = field.NewPath("levels")
	}
	if len(cfg.Levels) > 16 {
		errs = append(errs, field.TooMany(levels, len(cfg.Levels), 16))
	}
	for i, l := range cfg.Levels {
		p := levels.Index(i)
		switch {
		case l.Name == "":
			errs = append(errs, field.Required(p.Child("name"), "give the level a name such as leaf or spine"))
		case len(validation.IsDNS1123Label(l.Name)) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), l.Name, "use lower-case letters, digits and '-', e.g. leaf"))
		case l.Name == lockstep.LevelHost || l.Name == lockstep.LevelCluster:
			errs = append(errs, field.Invalid(p.Child("name"), l.Name, "host and cluster are implicit levels; name the level after its switch tier, e.g. leaf"))
		default:
			if j, dup := names[l.Name]; dup {
				errs = append(errs, field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also levels[%d]); give each level its own name", l.Name, j)))
			} else {
				names[l.Name] = i
			}
		}
		switch {
		case l.LabelKey == "":
			errs = append(errs, field.Required(p.Child("nodeLabel"), "set the node label key that carries this level, e.g. "+lockstep.LabelFabricTier0))
		case len(validation.IsQualifiedName(l.LabelKey)) > 0:
			errs = append(errs, field.Invalid(p.Child("nodeLabel"), l.LabelKey, "must be a label key: "+strings.Join(validation.IsQualifiedName(l.LabelKey), "; ")))
		default:
			if j, dup := keys[l.LabelKey]; dup {
				errs = append(errs, field.Duplicate(p.Child("nodeLabel"), fmt.Sprintf("%s (also levels[%d]); each level needs its own label key", l.LabelKey, j)))
			} else {
				keys[l.LabelKey] = i
			}
		}
	}
	over := path.Child("oversubscription")
	if path == nil {
		over = field.NewPath("oversubscription")
	}
	for name, o := range cfg.Oversubscription {
		if _, ok := names[name]; !ok && name != lockstep.LevelCluster {
			errs = append(errs, field.NotSupported(over.Key(name), name, append(slices.Sorted(maps.Keys(names)), lockstep.LevelCluster)))
		}
		if o < 1 {
			errs = append(errs, field.Invalid(over.Key(name), o, "must be at least 1 (1 is non-blocking, 2 is 2:1)"))
		}
	}
	// The domain tree's own invariants, which the checks above imply; kept
	// so that a change to either cannot let through what the tree refuses.
	if len(errs) == 0 {
		if err := lockstep.ValidateLevels(cfg.Levels); err != nil {
			errs = append(errs, field.Invalid(levels, cfg.Levels, err.Error()))
		}
	}
	return errs
}

func decodeStrict(data []byte, into any) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("parsing YAML: %w", err)
	}
	strictErrs, err := kjson.UnmarshalStrict(j, into, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}
