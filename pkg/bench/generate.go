package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// TraceConfig parameterises GenerateTrace. Zero values of Sizes,
// GPUsPerNode and the duration fields take DefaultTraceConfig's; an empty
// ConstraintLevel means no job gets a topology constraint.
type TraceConfig struct {
	// Seed makes the trace: one seed, one trace, on every platform.
	Seed int64
	// Jobs is the number of jobs.
	Jobs int
	// Span is the time over which submissions are spread uniformly,
	// starting Start after the trace starts.
	Start, Span time.Duration
	// IDPrefix names the jobs <IDPrefix>-000, <IDPrefix>-001, …; empty is
	// "job".
	IDPrefix string
	// Priority is every job's priority class (Job.Priority); empty for
	// none.
	Priority string
	// ClusterGPUs caps job sizes: sizes above it are not drawn. Zero or less
	// is no cap.
	ClusterGPUs int
	// GPUsPerNode is the GPU count of a node: jobs up to it are one pod,
	// larger jobs are gangs of whole-node pods.
	GPUsPerNode int
	// Sizes are the job sizes in GPUs and their shares of the jobs.
	Sizes []SizeShare
	// Durations are log-normal: MedianDuration·e^(DurationSigma·Z) with Z
	// standard normal, clamped to [MinDuration, MaxDuration] and rounded to
	// whole seconds.
	MedianDuration time.Duration
	DurationSigma  float64
	MinDuration    time.Duration
	MaxDuration    time.Duration
	// ConstraintLevel is the level of the topology constraints drawn, e.g.
	// "leaf"; empty for none.
	ConstraintLevel string
	// ConstraintLevelGPUs is how many GPUs one domain of ConstraintLevel
	// holds: Required is only drawn for gangs that fit in one, so every job
	// of the trace can run on an empty cluster.
	ConstraintLevelGPUs int
	// RequiredShare and PreferredShare are the chances that a multi-pod
	// gang gets a Required or a Preferred constraint.
	RequiredShare  float64
	PreferredShare float64
}

// SizeShare is a job size and its share of the jobs of a trace.
type SizeShare struct {
	GPUs  int
	Share float64
}

// DefaultTraceConfig is the configuration of test/e2e/traces/default.csv:
// 150 jobs over an hour for the 256 GPUs of test/e2e/models/hgx-32.yaml (8
// GPUs per node, 8 nodes per leaf). docs/benchmarks.md explains the mix.
func DefaultTraceConfig() TraceConfig {
	return TraceConfig{
		Seed:        20250101,
		Jobs:        150,
		Span:        time.Hour,
		ClusterGPUs: 256,
		GPUsPerNode: 8,
		Sizes: []SizeShare{
			{GPUs: 1, Share: 0.54},
			{GPUs: 2, Share: 0.08},
			{GPUs: 4, Share: 0.08},
			{GPUs: 8, Share: 0.12},
			{GPUs: 16, Share: 0.06},
			{GPUs: 32, Share: 0.05},
			{GPUs: 64, Share: 0.03},
			{GPUs: 128, Share: 0.027},
			{GPUs: 256, Share: 0.013},
		},
		MedianDuration:      5 * time.Minute,
		DurationSigma:       1,
		MinDuration:         time.Minute,
		MaxDuration:         time.Hour,
		ConstraintLevel:     "leaf",
		ConstraintLevelGPUs: 64,
		RequiredShare:       0.2,
		PreferredShare:      0.2,
	}
}

// GenerateTrace draws a trace: job sizes in exact proportion to their shares
// (largest remainder) in random order, submissions uniform over Span,
// log-normal durations, constraints on some multi-pod gangs. Jobs are named
// job-000, job-001, … (IDPrefix) in submission order. The same config
// always gives the same trace.
func GenerateTrace(cfg TraceConfig) []Job {
	cfg = cfg.withDefaults()
	if cfg.Jobs <= 0 {
		return nil
	}
	rng := newTraceRand(cfg.Seed)

	sizes := sizeQuotas(cfg.Sizes, cfg.ClusterGPUs, cfg.Jobs)
	for i := len(sizes) - 1; i > 0; i-- {
		j := rng.intN(i + 1)
		sizes[i], sizes[j] = sizes[j], sizes[i]
	}
	submits := make([]time.Duration, cfg.Jobs)
	for i := range submits {
		submits[i] = cfg.Start + (time.Duration(rng.float64() * float64(cfg.Span))).Round(time.Second)
	}
	slices.Sort(submits)

	width := max(3, len(fmt.Sprint(cfg.Jobs-1)))
	jobs := make([]Job, cfg.Jobs)
	for i := range jobs {
		job := Job{
			ID:       fmt.Sprintf("%s-%0*d", cfg.IDPrefix, width, i),
			Submit:   submits[i],
			Duration: cfg.duration(rng.normal()),
			Priority: cfg.Priority,
		}
		size := sizes[i]
		if size <= cfg.GPUsPerNode {
			job.Replicas, job.GPUsPerReplica = 1, size
		} else {
			job.Replicas, job.GPUsPerReplica = (size+cfg.GPUsPerNode-1)/cfg.GPUsPerNode, cfg.GPUsPerNode
		}
		if job.Replicas >= 2 && cfg.ConstraintLevel != "" {
			switch u := rng.float64(); {
			case u < cfg.RequiredShare && job.GPUs() <= cfg.ConstraintLevelGPUs:
				job.Topology = &Constraint{Level: cfg.ConstraintLevel, Mode: ModeRequired}
			case u >= 1-cfg.PreferredShare:
				job.Topology = &Constraint{Level: cfg.ConstraintLevel, Mode: ModePreferred}
			}
		}
		jobs[i] = job
	}
	SortJobs(jobs)
	return jobs
}

// PriorityTraceConfig parameterises GeneratePriorityTrace: two traces of
// two priority classes, replayed together.
type PriorityTraceConfig struct {
	// Low keeps the cluster full; High arrives while it is.
	Low, High TraceConfig
}

// DefaultPriorityTraceConfig is the configuration of
// test/e2e/traces/priority.csv, for the 256 GPUs of
// test/e2e/models/hgx-32-oversubscribed.yaml (8 GPUs per node, 8 nodes per
// leaf): 40 bench-low gangs and whole-node jobs submitted in the first ten
// minutes, about 1.4 hours of the whole cluster's work, and 6 bench-high
// gangs (four of 4×8 GPUs, two of 2×8, each leaf:Required or
// leaf:Preferred) submitted between minutes 15 and 45, while the low work
// still queues. docs/benchmarks.md explains the choice.
func DefaultPriorityTraceConfig() PriorityTraceConfig {
	return PriorityTraceConfig{
		Low: TraceConfig{
			Seed:        20260126,
			Jobs:        40,
			Span:        10 * time.Minute,
			IDPrefix:    "low",
			Priority:    PriorityLow,
			ClusterGPUs: 256,
			GPUsPerNode: 8,
			Sizes: []SizeShare{
				{GPUs: 8, Share: 0.25},
				{GPUs: 16, Share: 0.3},
				{GPUs: 32, Share: 0.3},
				{GPUs: 64, Share: 0.15},
			},
			MedianDuration:      20 * time.Minute,
			DurationSigma:       0.4,
			MinDuration:         10 * time.Minute,
			MaxDuration:         40 * time.Minute,
			ConstraintLevel:     "leaf",
			ConstraintLevelGPUs: 64,
			PreferredShare:      0.3,
		},
		High: TraceConfig{
			Seed:        20260128,
			Jobs:        6,
			Start:       15 * time.Minute,
			Span:        30 * time.Minute,
			IDPrefix:    "high",
			Priority:    PriorityHigh,
			ClusterGPUs: 256,
			GPUsPerNode: 8,
			Sizes: []SizeShare{
				{GPUs: 16, Share: 1.0 / 3},
				{GPUs: 32, Share: 2.0 / 3},
			},
			MedianDuration:      10 * time.Minute,
			DurationSigma:       0.4,
			MinDuration:         5 * time.Minute,
			MaxDuration:         20 * time.Minute,
			ConstraintLevel:     "leaf",
			ConstraintLevelGPUs: 64,
			RequiredShare:       0.5,
			PreferredShare:      0.5,
		},
	}
}

// GeneratePriorityTrace draws the Low and the High trace (GenerateTrace)
// and returns them together in submission order. Give the two configs
// different IDPrefixes: their jobs' IDs must differ.
func GeneratePriorityTrace(cfg PriorityTraceConfig) []Job {
	jobs := append(GenerateTrace(cfg.Low), GenerateTrace(cfg.High)...)
	SortJobs(jobs)
	return jobs
}

func (cfg TraceConfig) withDefaults() TraceConfig {
	def := DefaultTraceConfig()
	if cfg.IDPrefix == "" {
		cfg.IDPrefix = "job"
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = def.Sizes
	}
	if cfg.GPUsPerNode <= 0 {
		cfg.GPUsPerNode = def.GPUsPerNode
	}
	if cfg.MedianDuration <= 0 {
		cfg.MedianDuration = def.MedianDuration
	}
	if cfg.DurationSigma <= 0 {
		cfg.DurationSigma = def.DurationSigma
	}
	if cfg.MinDuration <= 0 {
		cfg.MinDuration = min(def.MinDuration, cfg.MedianDuration)
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = max(def.MaxDuration, cfg.MedianDuration)
	}
	return cfg
}

// duration maps a standard normal draw to a job duration.
func (cfg TraceConfig) duration(z float64) time.Duration {
	d := time.Duration(float64(cfg.MedianDuration) * math.Exp(cfg.DurationSigma*z))
	d = min(max(d, cfg.MinDuration), cfg.MaxDuration).Round(time.Second)
	return max(d, time.Second)
}

// sizeQuotas returns jobs job sizes in proportion to the shares of the sizes
// that fit capGPUs (no cap when capGPUs <= 0), by largest remainder; ties go
// to the smaller size. The result is sorted by size.
func sizeQuotas(shares []SizeShare, capGPUs, jobs int) []int {
	var fitting []SizeShare
	total := 0.0
	for _, s := range shares {
		if s.GPUs >= 0 && s.Share > 0 && (capGPUs <= 0 || s.GPUs <= capGPUs) {
			fitting = append(fitting, s)
			total += s.Share
		}
	}
	if len(fitting) == 0 {
		fitting, total = []SizeShare{{GPUs: 1, Share: 1}}, 1
	}
	slices.SortStableFunc(fitting, func(a, b SizeShare) int { return cmp.Compare(a.GPUs, b.GPUs) })
	// Quotas in millionths of a job, as integers, so that float noise cannot
	// break a tie of remainders.
	const unit = 1_000_000
	counts := make([]int, len(fitting))
	rest := make([]int64, len(fitting))
	assigned := 0
	for i, s := range fitting {
		exact := int64(math.Round(s.Share / total * float64(jobs) * unit))
		counts[i] = int(exact / unit)
		rest[i] = exact % unit
		assigned += counts[i]
	}
	order := make([]int, len(fitting))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rest[b], rest[a]) })
	for k := 0; assigned < jobs; k = (k + 1) % len(order) {
		counts[order[k]]++
		assigned++
	}
	sizes := make([]int, 0, jobs)
	for i, s := range fitting {
		for range counts[i] {
			sizes = append(sizes, s.GPUs)
		}
	}
	return sizes
}

// traceRand derives every draw from PCG's raw 64-bit output with formulas of
// its own, rather than rand.Rand's helpers, so a committed trace does not
// depend on how a Go release implements IntN or NormFloat64.
type traceRand struct{ src *rand.PCG }

func newTraceRand(seed int64) *traceRand {
	// The second PCG word is a fixed stream constant ("lockstep").
	return &traceRand{src: rand.NewPCG(uint64(seed), 0x6c6f636b73746570)}
}

// float64 is uniform in [0, 1), from the top 53 bits.
func (r *traceRand) float64() float64 { return float64(r.src.Uint64()>>11) / (1 << 53) }

// intN is uniform in [0, n) up to a bias below n/2^64, irrelevant here.
func (r *traceRand) intN(n int) int { return int(r.src.Uint64() % uint64(n)) }

// normal is standard normal by the Box-Muller transform.
func (r *traceRand) normal() float64 {
	u1 := 1 - r.float64() // (0, 1]: log stays finite
	u2 := r.float64()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
