package bench

import (
	"time"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Scheduler names a Run may carry; the report singles out SchedulerLockstep
// for the targets and SchedulerKube as the throughput baseline.
const (
	SchedulerKube         = "kube-scheduler"
	SchedulerCoscheduling = "coscheduling"
	SchedulerLockstep     = "lockstep"
)

// Node is one node of the benchmark cluster.
type Node struct {
	Name   string
	Labels map[string]string
	// Profile is the name of a built-in pkg/topology profile.
	Profile string
}

// Cluster is the cluster a trace was replayed on, as its model declares it.
type Cluster struct {
	Name  string
	Nodes []Node
	// Levels are the model's levels, narrowest first.
	Levels []topology.Level
	// Fabric carries the model's oversubscription per level.
	Fabric topology.Fabric
}

// Run is what a runner observed while replaying a trace against one
// scheduler.
type Run struct {
	// Scheduler is SchedulerKube, SchedulerCoscheduling, SchedulerLockstep
	// or another name.
	Scheduler string
	// Start is the first submission; End is when observation stopped.
	Start, End time.Time
	Jobs       []JobRun
	// Utilization are periodic samples of the GPUs held by bound pods.
	Utilization []Sample
	// TimeCompression is the factor the trace was compressed by
	// (Compress); trace-time metrics multiply replay times by it. Below 1
	// (or unset) counts as 1.
	TimeCompression float64
	// PlanTime is how long the scheduler spent planning gangs; nil for a
	// scheduler without TopologyPlacement.
	PlanTime *PlanTime
}

// Sample is the number of GPUs held by pods at one instant.
type Sample struct {
	At       time.Time
	BusyGPUs int
}

// JobRun is one job of the replay.
type JobRun struct {
	// Job is the trace entry as replayed (after Compress).
	Job       Job
	Submitted time.Time
	// Finished is zero when the job did not finish before End.
	Finished time.Time
	// Pods are the pods of the job's last run; a pod that was never
	// created may be absent.
	Pods []PodRun
	// EarlierRuns are the job's runs before its last one, in order. The
	// controller restarts a gang whole, so a preempted job runs again from
	// the start: Finished and the wait are its last run's.
	EarlierRuns []EarlierRun
	// Slowdown is the factor RuntimeModel applied to the job's duration
	// when its gang was released; 0 when it was never released.
	Slowdown float64
}

// EarlierRun is a run of a job that ended before the job's last run did.
type EarlierRun struct {
	// Pods are the run's pods; a pod's Finished is when it stopped holding
	// its GPUs: its end or its deletion.
	Pods []PodRun
	// EvictedPods are the run's pods the scheduler preempted: deleted
	// while bound, with a DisruptionTarget condition of reason
	// PreemptionByScheduler. Upstream's DefaultPreemption and Lockstep
	// both write it.
	EvictedPods int
	// Evicted is the first of those deletions; zero when the run ended for
	// another reason.
	Evicted time.Time
	// Preemptor is the job that preempted the run: the gang or pod
	// Lockstep's condition message names (lockstep.ParsePreemption), else
	// the pod the victims' Preempted event relates to, as upstream's
	// DefaultPreemption sets it; "" when neither names one of the trace's
	// jobs.
	Preemptor string
}

// Preempted reports whether preemption ended the run.
func (r EarlierRun) Preempted() bool { return r.EvictedPods > 0 }

// PodRun is one pod of a job.
type PodRun struct {
	Name string
	// Node is "" when the pod was never bound.
	Node string
	// GPUs are the indices of the pod's GPUs on Node; 0 when unknown.
	GPUs topology.GPUSet
	// Bound is zero when the pod was never bound.
	Bound time.Time
	// Finished is zero when the pod did not finish before End.
	Finished time.Time
}

// ScaleGangSizes are the pod counts of the scale runs' gangs, cycled: gangs
// of 16 to 128 GPUs in 8-GPU pods, for the KWOK scale run
// (cmd/lockstep-bench) and the in-process one (internal/perf) alike.
var ScaleGangSizes = [...]int{2, 4, 4, 8, 8, 16}
