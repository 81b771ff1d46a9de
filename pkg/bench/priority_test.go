package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// classJob is job with a priority class.
func classJob(id string, replicas, gpus int, class string) Job {
	j := job(id, replicas, gpus)
	j.Priority = class
	return j
}

// preemptionSummary is the part of a Result the preemption metrics make.
type preemptionSummary struct {
	GPUHours, UsefulGPUHours, WasteGPUHours float64
	PreemptedJobs, Preemptions, EvictedPods int
	Preemptors, AttributedPreemptions       int
	MostPreemptionsByOne                    int
	PreemptionLostGPUHours                  float64
	GangWaitP50Seconds                      *float64
	Priorities                              []PriorityResult
	// PerJob are each job's ID, preemptions, evicted pods and lost GPU-hours.
	PerJob []JobResult
}

func summarizePreemption(res Result) preemptionSummary {
	s := preemptionSummary{
		GPUHours: res.GPUHours, UsefulGPUHours: res.UsefulGPUHours, WasteGPUHours: res.WasteGPUHours,
		PreemptedJobs: res.PreemptedJobs, Preemptions: res.Preemptions, EvictedPods: res.EvictedPods,
		Preemptors: res.Preemptors, AttributedPreemptions: res.AttributedPreemptions, MostPreemptionsByOne: res.MostPreemptionsByOne,
		PreemptionLostGPUHours: res.PreemptionLostGPUHours, GangWaitP50Seconds: res.GangWaitP50Seconds,
		Priorities: res.Priorities,
	}
	for _, j := range res.PerJob {
		s.PerJob = append(s.PerJob, JobResult{ID: j.ID, Priority: j.Priority, WaitSeconds: j.WaitSeconds,
			Preemptions: j.Preemptions, PreemptedBy: j.PreemptedBy, EvictedPods: j.EvictedPods, PreemptionLostGPUHours: j.PreemptionLostGPUHours})
	}
	return s
}

func TestSummarizePreemption(t *testing.T) {
	c := hgxCluster(16, 8, 2)
	tests := []struct {
		name string
		run  Run
		want preemptionSummary
	}{
		{
			name: "a whole low gang preempted once, restarted and finished; the high gang and a job without a class",
			run: Run{
				Scheduler: SchedulerKube, Start: at(0), End: at(100), TimeCompression: 2,
				Jobs: []JobRun{
					// Whole at 3 s, one pod evicted at 13 s, the other deleted
					// by the restart at 14 s; the second run is whole at 21 s.
					{Job: classJob("low", 2, 8, PriorityLow), Submitted: at(0), Finished: at(81),
						EarlierRuns: []EarlierRun{{
							Pods:    []PodRun{pod("low-0", "n00", all8, 2, 14), pod("low-1", "n01", all8, 3, 13)},
							Evicted: at(13), EvictedPods: 1, Preemptor: "high",
						}},
						Pods: []PodRun{pod("low-0", "n02", all8, 20, 81), pod("low-1", "n03", all8, 21, 81)}},
					{Job: job("plain", 1, 1), Submitted: at(0), Finished: at(5), Pods: []PodRun{pod("plain-0", "n04", all8&1, 1, 5)}},
					{Job: classJob("high", 4, 8, PriorityHigh), Submitted: at(10), Finished: at(72), Pods: []PodRun{
						pod("high-0", "n00", all8, 12, 72), pod("high-1", "n01", all8, 12, 72), pod("high-2", "n05", all8, 12, 72), pod("high-3", "n06", all8, 12, 72),
					}},
				},
			},
			want: preemptionSummary{
				// Held, replay GPU-seconds: low 8·12+8·10 then 8·61+8·60,
				// plain 4, high 4·8·60; useful: low 2·8·60, plain 4, high
				// 1920; lost: low 16·(13−3). Trace time doubles them.
				GPUHours:       (176 + 968 + 4 + 1920) * 2 / 3600.0,
				UsefulGPUHours: (960 + 4 + 1920) * 2 / 3600.0,
				WasteGPUHours:  (176 + 968 - 960 - 160) * 2 / 3600.0,
				PreemptedJobs:  1, Preemptions: 1, EvictedPods: 1,
				Preemptors: 1, AttributedPreemptions: 1, MostPreemptionsByOne: 1,
				PreemptionLostGPUHours: 160 * 2 / 3600.0,
				// Waits 21 (the last run's full bind), 1, 2.
				GangWaitP50Seconds: ptr(2.0),
				Priorities: []PriorityResult{
					{Class: PriorityHigh, Value: 1000, Jobs: 1, FinishedJobs: 1, FullyBoundJobs: 1,
						GangWaitP50Seconds: ptr(2.0), GangWaitP99Seconds: ptr(2.0), MakespanTraceSeconds: (72 - 10) * 2},
					{Class: PriorityLow, Value: 100, Jobs: 1, FinishedJobs: 1, FullyBoundJobs: 1,
						GangWaitP50Seconds: ptr(21.0), GangWaitP99Seconds: ptr(21.0), MakespanTraceSeconds: 81 * 2,
						PreemptedJobs: 1, Preemptions: 1, EvictedPods: 1, PreemptionLostGPUHours: 160 * 2 / 3600.0},
					{Class: "", Value: 0, Jobs: 1, FinishedJobs: 1, FullyBoundJobs: 1,
						GangWaitP50Seconds: ptr(1.0), GangWaitP99Seconds: ptr(1.0), MakespanTraceSeconds: 5 * 2},
				},
				PerJob: []JobResult{
					{ID: "low", Priority: PriorityLow, WaitSeconds: ptr(21.0), Preemptions: 1, PreemptedBy: []string{"high"}, EvictedPods: 1, PreemptionLostGPUHours: 160 * 2 / 3600.0},
					{ID: "plain", WaitSeconds: ptr(1.0)},
					{ID: "high", Priority: PriorityHigh, WaitSeconds: ptr(2.0)},
				},
			},
		},
		{
			name: "preempted twice, once before the gang was whole; the last run never whole",
			run: Run{
				Scheduler: SchedulerKube, Start: at(0), End: at(50),
				Jobs: []JobRun{
					{Job: classJob("low", 2, 8, PriorityLow), Submitted: at(0),
						EarlierRuns: []EarlierRun{
							// Whole from 4 s to 10 s, both pods evicted.
							{Pods: []PodRun{pod("low-0", "n00", all8, 2, 10), pod("low-1", "n01", all8, 4, 10)}, Evicted: at(10), EvictedPods: 2, Preemptor: "x"},
							// One pod bound, evicted before its peer came:
							// its GPUs were waste, no work lost.
							// Its preemptor unknown: no event named it.
							{Pods: []PodRun{pod("low-0", "n00", all8, 20, 25), unbound("low-1")}, Evicted: at(25), EvictedPods: 1},
						},
						Pods: []PodRun{pod("low-0", "n02", all8, 30, 0), unbound("low-1")}},
				},
			},
			want: preemptionSummary{
				// Held: 8·8+8·6, 8·5, then 8·20 to the end.
				GPUHours:      (112 + 40 + 160) / 3600.0,
				WasteGPUHours: (112 + 40 + 160 - 96) / 3600.0,
				PreemptedJobs: 1, Preemptions: 2, EvictedPods: 3,
				Preemptors: 1, AttributedPreemptions: 1, MostPreemptionsByOne: 1,
				PreemptionLostGPUHours: 16 * 6 / 3600.0,
				Priorities: []PriorityResult{
					{Class: PriorityLow, Value: 100, Jobs: 1, MakespanTraceSeconds: 50, MakespanIncomplete: true,
						PreemptedJobs: 1, Preemptions: 2, EvictedPods: 3, PreemptionLostGPUHours: 16 * 6 / 3600.0},
				},
				PerJob: []JobResult{{ID: "low", Priority: PriorityLow, Preemptions: 2, PreemptedBy: []string{"x", ""}, EvictedPods: 3, PreemptionLostGPUHours: 16 * 6 / 3600.0}},
			},
		},
		{
			name: "a restart for another reason is no preemption; no classes, no Priorities",
			run: Run{
				Scheduler: SchedulerKube, Start: at(0), End: at(50),
				Jobs: []JobRun{
					{Job: job("a", 2, 8), Submitted: at(0), Finished: at(40),
						EarlierRuns: []EarlierRun{{Pods: []PodRun{pod("a-0", "n00", all8, 1, 10), pod("a-1", "n01", all8, 1, 10)}}},
						Pods:        []PodRun{pod("a-0", "n00", all8, 20, 40), pod("a-1", "n01", all8, 20, 40)}},
				},
			},
			want: preemptionSummary{
				GPUHours:           (144 + 320) / 3600.0,
				UsefulGPUHours:     320 / 3600.0,
				WasteGPUHours:      144 / 3600.0,
				GangWaitP50Seconds: ptr(20.0),
				PerJob:             []JobResult{{ID: "a", WaitSeconds: ptr(20.0)}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Summarize(c, tc.run)
			mustNoError(t, err)
			if diff := cmp.Diff(tc.want, summarizePreemption(got), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("Summarize (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestUsedPriorityClasses(t *testing.T) {
	tests := []struct {
		name string
		jobs []Job
		want []PriorityClass
	}{
		{"none", []Job{job("a", 1, 1)}, nil},
		{"highest first, each once", []Job{classJob("a", 1, 1, PriorityLow), job("b", 1, 1), classJob("c", 1, 1, PriorityHigh), classJob("d", 1, 1, PriorityLow)},
			[]PriorityClass{{PriorityHigh, 1000}, {PriorityLow, 100}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, UsedPriorityClasses(tc.jobs)); diff != "" {
				t.Errorf("UsedPriorityClasses (-want,+got):\n%s", diff)
			}
		})
	}
}
