package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestBindBacklogBoundsScheduling runs the scheduler with a client of 5
// requests a second, so that binding, not planning, sets the pace, and
// gives it a burst of ten 8-pod gangs. The scheduling thread waits while
// its binds in flight are at their bound (docs/scheduler.md, "The bind
// backlog"), and every gang is still bound whole: the wait never holds a
// gang whose members wait at Permit.
func TestBindBacklogBoundsScheduling(t *testing.T) {
	ctx := context.Background()
	const (
		gangs, members = 10, 8
		// The bound at 5 QPS is the floor, minBindBacklog. Binds past it
		// are members that passed PreFilter while the backlog was below
		// it and then left Permit together with their gang: Coscheduling
		// queues a gang's members together, so about one gang's worth;
		// two allow for the gang being scheduled when another completes.
		bound = 64 + 2*members
	)
	model := *cluster.Model
	pool := clustermodel.Pool{Name: "backlog", Profile: "hgx-h100", Nodes: gangs,
		NodesPerDomain: map[string]int{}, FirstDomain: map[string]int{}}
	for _, l := range model.Levels {
		// Domains of their own: the suite's nodes stay out of the plans.
		pool.NodesPerDomain[l.Name], pool.FirstDomain[l.Name] = gangs, 900
	}
	model.Pools = []clustermodel.Pool{pool}
	nodes := model.Nodes()
	const poolLabel = "e2e.lockstep.dev/pool"
	for _, n := range nodes {
		n.Labels[poolLabel] = pool.Name
	}
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	for _, n := range nodes {
		waitNodeTopology(t, n.Name, "published", func(*v1alpha1.NodeTopology) bool { return true })
	}

	cfg, err := localcluster.DeployedSchedulerConfig(cluster.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := cluster.KubeSchedulerComponentWith("scheduler", lockstep.SchedulerName, cfg,
		localcluster.SchedulerOptions{ClientRate: &localcluster.ClientRate{QPS: 5, Burst: 5}})
	if err != nil {
		t.Fatal(err)
	}
	restartScheduler(t, slow)
	t.Cleanup(func() {
		comp, err := cluster.SchedulerComponent()
		if err != nil {
			t.Fatal(err)
		}
		restartScheduler(t, comp)
	})

	ns := cluster.NewNamespace(t)
	for g := range gangs {
		gang := fmt.Sprintf("g-%d", g)
		if err := cluster.Client.Create(ctx, utiltesting.MakePodGroup(gang, ns, members).Obj()); err != nil {
			t.Fatal(err)
		}
		for m := range members {
			pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", gang, m), ns).GPUs(1).SchedulerName(localcluster.SchedulerName).PodGroup(gang).Obj()
			pod.Spec.NodeSelector = map[string]string{poolLabel: pool.Name}
			cluster.CreatePods(t, pod)
		}
	}

	inFlight := 0.0
	err = localcluster.Poll(ctx, 500*time.Millisecond, 3*time.Minute, "every gang bound", func(ctx context.Context) (bool, error) {
		if s, err := cluster.Scrape(ctx, "scheduler"); err == nil {
			inFlight = max(inFlight, s.Find("lockstep_scheduler_binds_in_flight", nil).Sum())
		}
		pods, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(framework.BoundPods(pods.Items)) == gangs*members, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for g := range gangs {
		waitGangBound(t, ns, fmt.Sprintf("g-%d", g), members, time.Minute)
	}
	after := scrape(t, "scheduler")
	if waited := after.Find("lockstep_scheduler_bind_backlog_wait_seconds_total", nil).Sum(); waited <= 0 {
		t.Errorf("bind_backlog_wait_seconds_total = %v after %d pods bound at 5 QPS, want PreFilter to have waited", waited, gangs*members)
	}
	if inFlight > bound {
		t.Errorf("binds_in_flight reached %v, want at most %d", inFlight, bound)
	}
	t.Logf("binds in flight at most %v (sampled), PreFilter waited %.1f s", inFlight, after.Find("lockstep_scheduler_bind_backlog_wait_seconds_total", nil).Sum())
}

// restartScheduler replaces the running "scheduler" component by comp.
func restartScheduler(t *testing.T, comp localcluster.Component) {
	t.Helper()
	if err := cluster.KillComponent("scheduler"); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.StartComponent(context.Background(), comp); err != nil {
		t.Fatal(err)
	}
}
