package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCPUReadingSince checks the CPU a scale run charges to each process
// between two readings: a process replaced in between (a new pid under the
// name, a restarted component) or gone is not charged the difference of
// two processes' counters.
func TestCPUReadingSince(t *testing.T) {
	before := cpuReading{
		"etcd":       {pid: 10, cpu: 2 * time.Second},
		"controller": {pid: 11, cpu: 5 * time.Second},
		"agent":      {pid: 12, cpu: time.Second},
		"scheduler":  {pid: 13},
	}
	after := cpuReading{
		"etcd":       {pid: 10, cpu: 3500 * time.Millisecond},
		"controller": {pid: 21, cpu: 7 * time.Second},
		"agent":      {pid: 12, cpu: 0},
		"scheduler":  {pid: 13, cpu: 4 * time.Second},
		"kwok":       {pid: 14, cpu: time.Second},
	}
	got := after.since(before)
	want := map[string]time.Duration{"etcd": 1500 * time.Millisecond, "scheduler": 4 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("since (-want,+got):\n%s", diff)
	}
	if got, want := total(got), 5500*time.Millisecond; got != want {
		t.Errorf("total = %v, want %v", got, want)
	}
	if got, want := formatSpent(map[string]time.Duration{"etcd": 1500 * time.Millisecond, "scheduler": 4 * time.Second}), "scheduler 4.0 s, etcd 1.5 s"; got != want {
		t.Errorf("formatSpent = %q, want %q", got, want)
	}
}
