package main

import (
	"fmt"
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

// TestAPIRequests checks the bind window's request breakdown: counts
// summed over codes and scopes by verb and resource, differences between
// two readings, and the most frequent first.
func TestAPIRequests(t *testing.T) {
	metrics := func(bindings, heartbeats float64) []byte {
		return fmt.Appendf(nil, `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} %g
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="lockstep.dev",resource="nodetopologies",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} %g
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"} 3
# HELP apiserver_request_duration_seconds whatever
# TYPE apiserver_request_duration_seconds counter
apiserver_request_duration_seconds{verb="LIST"} 9
`, bindings, heartbeats)
	}
	before, after := parseAPIRequests(metrics(10, 100)), parseAPIRequests(metrics(850, 400))
	want := apiRequests{"POST pods/binding": 11, "PUT nodetopologies/status": 100, "LIST nodes": 3}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Errorf("parseAPIRequests (-want,+got):\n%s", diff)
	}
	window := after.since(before)
	if diff := cmp.Diff(apiRequests{"POST pods/binding": 840, "PUT nodetopologies/status": 300}, window); diff != "" {
		t.Errorf("since (-want,+got):\n%s", diff)
	}
	if got, want := window.top(1), "POST pods/binding 840"; got != want {
		t.Errorf("top(1) = %q, want %q", got, want)
	}
	if got, want := apiRequests(nil).top(3), "not read"; got != want {
		t.Errorf("top of nil = %q, want %q", got, want)
	}
	if got := parseAPIRequests([]byte("not {metrics")); got != nil {
		t.Errorf("parseAPIRequests of garbage = %v, want nil", got)
	}
}
