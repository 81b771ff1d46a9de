package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// components are the names the suite starts our binaries under.
var components = []string{"scheduler", "topology-agent", "controller"}

// TestComponentHealth checks that every component answers /healthz and
// /readyz, and that kube-scheduler's /metrics refuses an anonymous caller.
func TestComponentHealth(t *testing.T) {
	ctx := context.Background()
	for _, name := range components {
		ep, err := cluster.Endpoints(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, url := range []string{ep.Healthz, ep.Readyz} {
			// Readiness may lag a restarted component by a moment.
			err := localcluster.Poll(ctx, 200*time.Millisecond, 30*time.Second, url+" answering 200", func(ctx context.Context) (bool, error) {
				status, _, err := cluster.Get(ctx, url)
				return err == nil && status == http.StatusOK, nil
			})
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if ep.Secure {
			anonymous := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
			}}
			resp, err := anonymous.Get(ep.Metrics)
			if err != nil {
				t.Fatalf("anonymous GET %s: %v", ep.Metrics, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
				t.Errorf("anonymous GET %s: %d, want 401 or 403", ep.Metrics, resp.StatusCode)
			}
		}
	}
}

// TestMetrics runs a small gang job and checks each component's new series
// on its /metrics.
func TestMetrics(t *testing.T) {
	ns := cluster.NewNamespace(t)
	start := time.Now()
	before := scrape(t, "scheduler")

	createJob(t, pytorchJob(ns, "metrics", 1))
	waitJob(t, ns, "metrics", 2*time.Minute, "job running", hasCondition(v1alpha1.JobRunning, ""))
	pods := waitPods(t, ns, "metrics", 2, time.Minute)

	t.Run("scheduler", func(t *testing.T) {
		after := scrape(t, "scheduler")
		grew := func(name string, labels map[string]string) float64 {
			t.Helper()
			d := after.Find(name, labels).Sum() - before.Find(name, labels).Sum()
			if d <= 0 {
				t.Errorf("%s%v did not grow (%v → %v)", name, labels, before.Find(name, labels).Sum(), after.Find(name, labels).Sum())
			}
			return d
		}
		grew("lockstep_scheduler_plan_duration_seconds_count", map[string]string{"outcome": "planned"})
		grew("lockstep_scheduler_gang_wait_seconds_count", nil)
		n := grew("lockstep_scheduler_placement_efficiency_count", nil)
		sum := after.Find("lockstep_scheduler_placement_efficiency_sum", nil).Sum() - before.Find("lockstep_scheduler_placement_efficiency_sum", nil).Sum()
		if n > 0 && (sum/n <= 0 || sum/n > 1) {
			t.Errorf("mean placement efficiency of the new gangs %v, want in (0,1]", sum/n)
		}
		for _, name := range []string{"lockstep_scheduler_plans_held", "lockstep_scheduler_held_gpus"} {
			if len(after.Find(name, nil)) != 1 {
				t.Errorf("%s missing", name)
			}
		}
		for _, reason := range topologyplacement.PlanDropReasons() {
			if got := len(after.Find("lockstep_scheduler_plans_invalidated_total", map[string]string{"reason": reason})); got != 1 {
				t.Errorf("%d plans_invalidated_total{reason=%q} series, want one", got, reason)
			}
		}
		if got, want := len(after.Find("lockstep_scheduler_plans_invalidated_total", nil)), len(topologyplacement.PlanDropReasons()); got != want {
			t.Errorf("%d plans_invalidated_total series, want one per reason (%d)", got, want)
		}
	})

	t.Run("controller", func(t *testing.T) {
		s := scrape(t, "controller")
		if got := s.Find("lockstep_controller_jobs", map[string]string{"framework": "PyTorch", "state": "Running"}).Sum(); got < 1 {
			t.Errorf("lockstep_controller_jobs{framework=PyTorch,state=Running} = %v, want at least this job", got)
		}
		trainingjob := map[string]string{"controller": "trainingjob"}
		if s.Find("controller_runtime_reconcile_total", trainingjob).Sum() < 1 ||
			s.Find("controller_runtime_reconcile_time_seconds_count", trainingjob).Sum() < 1 {
			t.Error("controller-runtime's reconcile count and latency for controller=trainingjob missing or zero")
		}
		if len(s.Find("controller_runtime_reconcile_errors_total", trainingjob)) != 1 {
			t.Error("controller_runtime_reconcile_errors_total{controller=trainingjob} missing")
		}
	})

	t.Run("topology-agent", func(t *testing.T) {
		s := scrape(t, "topology-agent")
		// The pods' nodes were published when the pods landed there.
		for _, p := range pods {
			last := s.Find("lockstep_agent_last_publish_timestamp_seconds", map[string]string{"node": p.Spec.NodeName}).Sum()
			if at := time.Unix(0, int64(last*1e9)); at.Before(start.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
				t.Errorf("node %s last published at %v, want since the job started (%v)", p.Spec.NodeName, at, start)
			}
		}
		if s.Find("lockstep_agent_publishes_total", map[string]string{"result": "written"}).Sum() < 1 {
			t.Error("lockstep_agent_publishes_total{result=written} is zero")
		}
		if got := len(s.Find("lockstep_agent_discovery_errors_total", nil)); got != 4 {
			t.Errorf("%d discovery_errors_total series, want one per source (4)", got)
		}
	})
}

func scrape(t *testing.T, component string) framework.Samples {
	t.Helper()
	s, err := cluster.Scrape(context.Background(), component)
	if err != nil {
		t.Fatalf("scraping %s: %v", component, err)
	}
	return s
}
