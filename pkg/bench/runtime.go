package bench

import (
	"math"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Default communication shares of DefaultCommFraction; see
// docs/benchmarks/runtime-model.md for where they come from.
const (
	// DefaultCommFractionNode is a multi-GPU job on one node: its
	// collectives run over NVLink, fast against the compute of a step.
	DefaultCommFractionNode = 0.1
	// DefaultCommFractionGang is a job of several pods: its collectives
	// cross the network at ideal placement too, about ten times slower per
	// GPU than NVLink.
	DefaultCommFractionGang = 0.3
)

// DefaultCommFraction is the share of step time a job spends in collectives
// at its ideal placement when the trace does not say: 0 for one GPU (nothing
// to all-reduce), DefaultCommFractionNode for several GPUs in one pod,
// DefaultCommFractionGang for a gang of pods.
func DefaultCommFraction(j Job) float64 {
	switch {
	case j.GPUs() < 2:
		return 0
	case j.Replicas < 2:
		return DefaultCommFractionNode
	default:
		return DefaultCommFractionGang
	}
}

// CommShare is the job's CommFraction, or DefaultCommFraction when the
// trace leaves it out.
func (j Job) CommShare() float64 {
	if j.CommFraction != nil {
		return *j.CommFraction
	}
	return DefaultCommFraction(j)
}

// Slowdown is how much longer a job with communication share cf runs on a
// placement rated r than on the ideal one: the compute share is unchanged
// and the communication share takes Actual.Time/Best.Time as long,
//
//	slowdown = (1 − cf) + cf · Actual.Time / Best.Time.
//
// Actual.Time/Best.Time is 1/r.Efficiency; a placement the model rates
// better than its reference (Efficiency capped at 1) or one with no
// reference (no built-in profile) is not sped up: the slowdown is at least 1.
func Slowdown(cf float64, r topology.Rating) float64 {
	ratio := 1.0
	if r.Best.Time > 0 && r.Actual.Time > r.Best.Time {
		ratio = float64(r.Actual.Time) / float64(r.Best.Time)
	}
	return (1 - cf) + cf*ratio
}

// RuntimeModel gives the simulated runtime of a job on its placement: the
// one runtime model of the benchmark, built on the Rater every component
// reports placement efficiency with.
type RuntimeModel struct {
	m *clusterModel
}

// NewRuntimeModel builds the runtime model of a cluster.
func NewRuntimeModel(c Cluster) (*RuntimeModel, error) {
	m, err := newClusterModel(c)
	if err != nil {
		return nil, err
	}
	return &RuntimeModel{m: m}, nil
}

// Runtime returns how long the pods of job j, placed as pods (bound, with
// their nodes and GPU sets), run: j.Duration times Slowdown of the
// placement's rating, rounded to the nanosecond, and the slowdown. Jobs of
// fewer than 2 GPUs run j.Duration. A pod with an unknown GPU set gives an
// error wrapping ErrUnmodelled.
func (rm *RuntimeModel) Runtime(j Job, pods []PodRun) (time.Duration, float64, error) {
	if j.GPUs() < 2 {
		return j.Duration, 1, nil
	}
	rating, err := rm.m.rate(pods)
	if err != nil {
		return 0, 0, err
	}
	s := Slowdown(j.CommShare(), rating)
	return time.Duration(math.Round(float64(j.Duration) * s)), s, nil
}

// NodeGPUs returns the GPU count of the named node's profile, 0 for a node
// not in the cluster.
func (rm *RuntimeModel) NodeGPUs(node string) int {
	return rm.m.nodes[node].profile.GPUCount
}
