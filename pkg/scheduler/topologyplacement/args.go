package topologyplacement

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/pluginargs"
)

// Args configure the TopologyPlacement plugin (pluginConfig args in the
// KubeSchedulerConfiguration). Every field has a default.
type Args struct {
	// TopologyConfig holds levels (narrowest first, each a node label key;
	// default lockstep.DefaultLevels()) and oversubscription by level name
	// (or "cluster"), for the cost model. Inline: the args read
	// `levels:` and `oversubscription:` as every other component's
	// topology configuration does (pkg/lockstep/topologyconfig).
	lockstep.TopologyConfig `json:",inline"`
	// DefaultMode applies to gangs whose PodGroup names a level without a
	// mode: Required or Preferred. Default Preferred.
	DefaultMode lockstep.ConstraintMode `json:"defaultMode,omitempty"`
	// PreferredWait is how long a Preferred gang waits for its level before
	// the plugin allows one level wider, and again after each further wait.
	// Levels at which no domain could hold the gang even with every GPU free
	// cost no wait: the widening counts from the narrowest level that could
	// (placement.Gang.Widen). Default 30s.
	PreferredWait metav1.Duration `json:"preferredWait,omitempty"`
	// Unconstrained is how a gang that names no topology level (neither
	// Lockstep's PodGroup annotations nor Kueue's) is placed:
	// TightestFirst plans it as Preferred from the host, so it waits
	// PreferredWait per level for the narrowest domain that could hold it,
	// as a Preferred gang does, because a gang spread over oversubscribed
	// uplinks runs its collectives slower for its whole life; Anywhere
	// places it at once in the tightest domain free now. Default
	// TightestFirst.
	Unconstrained UnconstrainedPlacement `json:"unconstrained,omitempty"`
	// PlanTTL is how long a plan holds capacity without every member
	// reserved before it is dropped, so a stuck gang cannot block others.
	// Default 90s (Coscheduling's Permit wait plus scheduling time).
	PlanTTL metav1.Duration `json:"planTTL,omitempty"`
	// GangScoreWeight is the score of a node of the gang's plan (others get
	// 0); NVLinkScoreWeight scales the GPU-set quality score of pods outside
	// gangs. Defaults 100 and 100.
	GangScoreWeight   int64 `json:"gangScoreWeight,omitempty"`
	NVLinkScoreWeight int64 `json:"nvlinkScoreWeight,omitempty"`
	// TopologyMaxAge is how old a NodeTopology's status.heartbeatTime may
	// be before its node is left out of gang planning (the agents heartbeat
	// every minute by default, --heartbeat-interval). Nodes whose
	// NodeTopology fails validation are left out regardless. Default 5m;
	// 0 turns the staleness check off.
	TopologyMaxAge *metav1.Duration `json:"topologyMaxAge,omitempty"`
	// PreemptionMinRuntime protects running work from gang preemption
	// (PostFilter) for this long after it started: a gang from when its
	// last member started, a pod from its start. A large gang restarted
	// from its last checkpoint soon after it started loses little, but
	// preempted again and again it never gets going. Default 0s: none is
	// protected.
	PreemptionMinRuntime metav1.Duration `json:"preemptionMinRuntime,omitempty"`
}

// UnconstrainedPlacement is a value of Args.Unconstrained.
type UnconstrainedPlacement string

// Values of Args.Unconstrained.
const (
	TightestFirst UnconstrainedPlacement = "TightestFirst"
	Anywhere      UnconstrainedPlacement = "Anywhere"
)

// DefaultTopologyMaxAge is TopologyMaxAge when unset: five of the agent's
// default heartbeat intervals, so a few lost heartbeats never exclude a
// node.
const DefaultTopologyMaxAge = 5 * time.Minute

// maxAge is TopologyMaxAge after defaulting; 0 disables the check.
func (a *Args) maxAge() time.Duration {
	if a.TopologyMaxAge == nil {
		return DefaultTopologyMaxAge
	}
	return a.TopologyMaxAge.Duration
}

// decodeArgs turns the configured args (runtime.Unknown when the type is not
// registered with the scheduler's scheme, or nil) into Args with defaults.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch raw := obj.(type) {
	case nil:
	case *runtime.Unknown:
		if err := pluginargs.DecodeStrict(raw.Raw, args); err != nil {
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
	topologyconfig.Default(&a.TopologyConfig)
	if a.DefaultMode == "" {
		a.DefaultMode = lockstep.Preferred
	}
	if a.PreferredWait.Duration == 0 {
		a.PreferredWait.Duration = 30 * time.Second
	}
	if a.Unconstrained == "" {
		a.Unconstrained = TightestFirst
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
	if a.TopologyMaxAge == nil {
		a.TopologyMaxAge = &metav1.Duration{Duration: DefaultTopologyMaxAge}
	}
}

func (a *Args) validate(path *field.Path) field.ErrorList {
	errs := topologyconfig.Validate(a.TopologyConfig, path)
	if !a.DefaultMode.Valid() {
		errs = append(errs, field.NotSupported(path.Child("defaultMode"), a.DefaultMode, lockstep.ConstraintModes()))
	}
	if a.Unconstrained != TightestFirst && a.Unconstrained != Anywhere {
		errs = append(errs, field.NotSupported(path.Child("unconstrained"), a.Unconstrained, []UnconstrainedPlacement{TightestFirst, Anywhere}))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"preferredWait", a.PreferredWait.Duration}, {"planTTL", a.PlanTTL.Duration}, {"topologyMaxAge", a.maxAge()}, {"preemptionMinRuntime", a.PreemptionMinRuntime.Duration}} {
		if d.v < 0 {
			errs = append(errs, field.Invalid(path.Child(d.name), d.v.String(), "must not be negative"))
		}
	}
	for _, w := range []struct {
		name string
		v    int64
	}{{"gangScoreWeight", a.GangScoreWeight}, {"nvlinkScoreWeight", a.NVLinkScoreWeight}} {
		if w.v < 0 {
			errs = append(errs, field.Invalid(path.Child(w.name), w.v, "must not be negative"))
		}
	}
	return errs
}
