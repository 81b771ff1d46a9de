package bench

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestDefaultCommFraction(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		want float64
	}{
		{"one GPU", job("a", 1, 1), 0},
		{"CPU only", job("a", 3, 0), 0},
		{"several GPUs in one pod", job("a", 1, 8), DefaultCommFractionNode},
		{"two GPUs in one pod", job("a", 1, 2), DefaultCommFractionNode},
		{"a gang of pods", job("a", 2, 8), DefaultCommFractionGang},
		{"a gang of one-GPU pods", job("a", 4, 1), DefaultCommFractionGang},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultCommFraction(tc.job); got != tc.want {
				t.Errorf("DefaultCommFraction = %v, want %v", got, tc.want)
			}
			if got := tc.job.CommShare(); got != tc.want {
				t.Errorf("CommShare without comm_fraction = %v, want %v", got, tc.want)
			}
		})
	}
	given := job("a", 2, 8)
	given.CommFraction = ptr(0.0)
	if got := given.CommShare(); got != 0 {
		t.Errorf("CommShare with comm_fraction 0 = %v, want 0", got)
	}
}

func TestSlowdown(t *testing.T) {
	rating := func(best, actual time.Duration) topology.Rating {
		return topology.Rating{Best: topology.Estimate{Time: best}, Actual: topology.Estimate{Time: actual}}
	}
	tests := []struct {
		name   string
		cf     float64
		rating topology.Rating
		want   float64
	}{
		{"ideal placement", 0.3, rating(time.Second, time.Second), 1},
		{"half the bandwidth", 0.3, rating(time.Second, 2*time.Second), 1.3},
		{"no communication", 0, rating(time.Second, 2*time.Second), 1},
		{"almost all communication", 0.9, rating(time.Second, 4*time.Second), 0.1 + 3.6},
		{"better than the reference is not faster", 0.5, rating(2*time.Second, time.Second), 1},
		{"no reference", 0.5, rating(0, time.Second), 1},
		{"one GPU", 0.5, rating(0, 0), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Slowdown(tc.cf, tc.rating); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Slowdown = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRuntimeModel(t *testing.T) {
	// 16 HGX nodes, two leaves of 8 under a 2:1 spine.
	rm, err := NewRuntimeModel(hgxCluster(16, 8, 2))
	mustNoError(t, err)
	// t_actual / t_best of a 16-GPU gang across the spine
	// (TestPlacementEfficiency).
	crossSpine := 80_710_637.0 / 40_415_318.0
	withCF := func(j Job, cf float64) Job { j.CommFraction = &cf; return j }
	tests := []struct {
		name         string
		job          Job
		pods         []PodRun
		wantSlowdown float64
	}{
		{"gang in one leaf", job("a", 2, 8), []PodRun{pod("a-0", "n00", all8, 1, 0), pod("a-1", "n01", all8, 1, 0)}, 1},
		{"gang across the spine, default share", job("b", 2, 8), []PodRun{pod("b-0", "n00", all8, 1, 0), pod("b-1", "n08", all8, 1, 0)},
			1 - DefaultCommFractionGang + DefaultCommFractionGang*crossSpine},
		{"gang across the spine, its own share", withCF(job("b", 2, 8), 0.6), []PodRun{pod("b-0", "n00", all8, 1, 0), pod("b-1", "n08", all8, 1, 0)},
			0.4 + 0.6*crossSpine},
		{"gang across the spine, no communication", withCF(job("b", 2, 8), 0), []PodRun{pod("b-0", "n00", all8, 1, 0), pod("b-1", "n08", all8, 1, 0)}, 1},
		{"one GPU, unknown set", job("c", 1, 1), []PodRun{pod("c-0", "n00", 0, 1, 0)}, 1},
		{"one node on NVSwitch", job("d", 1, 4), []PodRun{pod("d-0", "n00", topology.NewGPUSet(0, 3, 5, 6), 1, 0)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, slowdown, err := rm.Runtime(tc.job, tc.pods)
			mustNoError(t, err)
			if math.Abs(slowdown-tc.wantSlowdown) > 1e-6 {
				t.Errorf("slowdown = %v, want %v", slowdown, tc.wantSlowdown)
			}
			want := time.Duration(math.Round(float64(tc.job.Duration) * slowdown))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("runtime (-want,+got):\n%s", diff)
			}
		})
	}

	_, _, err = rm.Runtime(job("e", 2, 8), []PodRun{pod("e-0", "n00", all8, 1, 0), pod("e-1", "n01", 0, 1, 0)})
	if !errors.Is(err, ErrUnmodelled) {
		t.Errorf("a gang with an unknown GPU set: error %v, want ErrUnmodelled", err)
	}
}
