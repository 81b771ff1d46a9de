package topologyplacement

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Args configure the TopologyPlacement plugin (pluginConfig args in the
// KubeSchedulerConfiguration). Every field has a default.
type Args struct {
	// Levels are the topology levels above the host, narrowest first, each a
	// node label key. Default: topology.DefaultLevels() (NVLink clique,
	// topograph's tier-0 leaf, tier-1 spine, tier-2 block).
	Levels []Level `json:"levels,omitempty"`
	// Oversubscription by level name (or "cluster" for traffic between the
	// widest domains), for the cost model (2 = 2:1).
	Oversubscription map[string]float64 `json:"oversubscription,omitempty"`
	// DefaultMode applies to gangs whose PodGroup names a level without a
	// mode: Required or Preferred. Default Preferred.
	DefaultMode placement.ConstraintMode `json:"defaultMode,omitempty"`
	// PreferredWait is how long a Preferred gang waits for its level before
	// the plugin allows one level wider, and again after each further wait.
	// Levels at which no domain could hold the gang even with every GPU free
	// cost no wait: the widening counts from the narrowest level that could
	// (placement.Gang.Widen). Default 30s.
	PreferredWait metav1.Duration `json:"preferredWait,omitempty"`
	// PlanTTL is how long a plan holds capacity without every member
	// reserved before it is dropped, so a stuck gang cannot block others.
	// Default 90s (Coscheduling's Permit wait plus scheduling time).
	PlanTTL metav1.Duration `json:"planTTL,omitempty"`
	// GangScoreWeight is the score of a node of the gang's plan (others get
	// 0); NVLinkScoreWeight scales the GPU-set quality score of pods outside
	// gangs. Defaults 100 and 100.
	GangScoreWeight   int64 `json:"gangScoreWeight,omitempty"`
	NVLinkScoreWeight int64 `json:"nvlinkScoreWeight,omitempty"`
}

// Level is one topology level.
type Level struct {
	Name      string `json:"name"`
	NodeLabel string `json:"nodeLabel"`
	// NVLink marks a multi-node NVLink level (GB200 NVL72 clique).
	NVLink bool `json:"nvlink,omitempty"`
}

// decodeArgs turns the configured args (runtime.Unknown when the type is not
// registered with the scheduler's scheme, or nil) into Args with defaults.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch raw := obj.(type) {
	case nil:
	case *runtime.Unknown:
		// Strict, so a misspelt field is an error rather than a default.
		data, err := yaml.YAMLToJSON(raw.Raw)
		if err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
		strictErrs, err := kjson.UnmarshalStrict(data, args, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
		if err == nil && len(strictErrs) > 0 {
			err = errors.Join(strictErrs...)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	default:
		if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	args.setDefaults()
	if errs := args.validate(field.NewPath("args")); len(errs) > 0 {
		return nil, fmt.Errorf("%s args: %w", Name, errs.ToAggregate())
	}
	return args, nil
}

func (a *Args) setDefaults() {
	if len(a.Levels) == 0 {
		for _, l := range topology.DefaultLevels() {
			a.Levels = append(a.Levels, Level{Name: l.Name, NodeLabel: l.LabelKey, NVLink: l.NVLink})
		}
	}
	if a.DefaultMode == "" {
		a.DefaultMode = placement.Preferred
	}
	if a.PreferredWait.Duration == 0 {
		a.PreferredWait.Duration = 30 * time.Second
	}
	if a.PlanTTL.Duration == 0 {
		a.PlanTTL.Duration = 90 * time.Second
	}
	if a.GangScoreWeight == 0 {
		a.GangScoreWeight = 100
	}
	if a.NVLinkScoreWeight == 0 {
		a.NVLinkScoreWeight = 100
	}
}

func (a *Args) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, l := range a.Levels {
		p := path.Child("levels").Index(i)
		if msgs := validation.IsDNS1123Label(l.Name); len(msgs) > 0 || l.Name == topology.HostLevel || l.Name == topology.ClusterLevel {
			errs = append(errs, field.Invalid(p.Child("name"), l.Name, "must be a DNS label other than host and cluster"))
		}
		if names[l.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), l.Name))
		}
		names[l.Name] = true
		if msgs := validation.IsQualifiedName(l.NodeLabel); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("nodeLabel"), l.NodeLabel, "must be a node label key"))
		}
	}
	for name, o := range a.Oversubscription {
		// "cluster" is the root above the widest level: traffic between its
		// top-level domains.
		if !names[name] && name != topology.ClusterLevel {
			errs = append(errs, field.NotFound(path.Child("oversubscription").Key(name), name))
		}
		if o < 1 {
			errs = append(errs, field.Invalid(path.Child("oversubscription").Key(name), o, "must be at least 1"))
		}
	}
	if a.DefaultMode != placement.Required && a.DefaultMode != placement.Preferred {
		errs = append(errs, field.NotSupported(path.Child("defaultMode"), a.DefaultMode, []placement.ConstraintMode{placement.Required, placement.Preferred}))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"preferredWait", a.PreferredWait.Duration}, {"planTTL", a.PlanTTL.Duration}} {
		if d.v < 0 {
			errs = append(errs, field.Invalid(path.Child(d.name), d.v.String(), "must not be negative"))
		}
	}
	if a.GangScoreWeight < 0 || a.NVLinkScoreWeight < 0 {
		errs = append(errs, field.Invalid(path.Child("gangScoreWeight"), a.GangScoreWeight, "score weights must not be negative"))
	}
	return errs
}

// topologyLevels converts the configured levels for pkg/topology.
func (a *Args) topologyLevels() []topology.Level {
	out := make([]topology.Level, len(a.Levels))
	for i, l := range a.Levels {
		out[i] = topology.Level{Name: l.Name, LabelKey: l.NodeLabel, NVLink: l.NVLink}
	}
	return out
}
