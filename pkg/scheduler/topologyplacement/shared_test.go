package topologyplacement

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Two profiles of one scheduler (lockstep-scheduler and its
// scheduler-plugins-scheduler alias) get one plugin: a plan made for a gang
// of one profile holds its GPUs from the other's gangs and pods.
func TestProfilesOfOneSchedulerShareBooks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := newInstances()
	args := mustArgs(t)
	builds := 0
	build := func() (*TopologyPlacement, error) {
		builds++
		p, _ := newTestPlugin(t)
		return p, nil
	}
	factory := new(int) // stands in for the scheduler's informer factory
	lockstepProfile, err := reg.getOrBuild(ctx, factory, "lockstep-scheduler", args, build)
	if err != nil {
		t.Fatal(err)
	}
	alias, err := reg.getOrBuild(ctx, factory, "scheduler-plugins-scheduler", mustArgs(t), build)
	if err != nil {
		t.Fatal(err)
	}
	if builds != 1 {
		t.Errorf("built %d plugins for two profiles of one scheduler, want 1", builds)
	}
	// A gang of the alias profile holds GPUs 0-3 of node a.
	alias.gangs.Books.Add("ray/raycluster#4", &placement.Plan{Members: []placement.Assignment{
		{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
	}}, time.Unix(0, 0))
	if diff := cmp.Diff(topology.NewGPUSet(0, 1, 2, 3), lockstepProfile.gangs.Books.HeldOn("a", "team/job#4")); diff != "" {
		t.Errorf("GPUs of node a that lockstep-scheduler's gangs must avoid (-want,+got):\n%s", diff)
	}

	// Another scheduler in the process has its own.
	other, err := reg.getOrBuild(ctx, new(int), "lockstep-scheduler", args, build)
	if err != nil {
		t.Fatal(err)
	}
	if other == lockstepProfile {
		t.Error("a second scheduler got the first one's plugin")
	}
}

// Profiles cannot configure the shared plugin differently: the error names
// both profiles and says what to do.
func TestProfilesWithDifferentArgsAreRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := newInstances()
	build := func() (*TopologyPlacement, error) {
		p, _ := newTestPlugin(t)
		return p, nil
	}
	factory := new(int)
	if _, err := reg.getOrBuild(ctx, factory, "lockstep-scheduler", mustArgs(t), build); err != nil {
		t.Fatal(err)
	}
	longer := mustArgs(t)
	longer.PlanTTL = metav1.Duration{Duration: 10 * time.Minute}
	_, err := reg.getOrBuild(ctx, factory, "scheduler-plugins-scheduler", longer, build)
	if err == nil {
		t.Fatal("profiles with different planTTL were accepted")
	}
	for _, want := range []string{`"lockstep-scheduler"`, `"scheduler-plugins-scheduler"`, "same pluginConfig args"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// When the scheduler's context ends its plugin is forgotten, so a scheduler
// started again in the process builds a new one.
func TestSchedulerStopForgetsItsPlugin(t *testing.T) {
	reg := newInstances()
	build := func() (*TopologyPlacement, error) {
		p, _ := newTestPlugin(t)
		return p, nil
	}
	factory := new(int)
	ctx, cancel := context.WithCancel(context.Background())
	first, err := reg.getOrBuild(ctx, factory, "lockstep-scheduler", mustArgs(t), build)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.by) == 0, nil
	})
	if err != nil {
		t.Fatalf("waiting for the stopped scheduler's plugin to be forgotten: %v", err)
	}
	again, err := reg.getOrBuild(context.Background(), factory, "lockstep-scheduler", mustArgs(t), build)
	if err != nil {
		t.Fatal(err)
	}
	if again == first {
		t.Error("a restarted scheduler got its predecessor's plugin")
	}
}

func mustArgs(t *testing.T) *Args {
	t.Helper()
	args, err := decodeArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// TestSharedIsPerRegistry: the instance is shared through the Shared the
// registry made, not through the process: two registries' schedulers,
// even over one informer factory, get plugins of their own.
func TestSharedIsPerRegistry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	build := func() (*TopologyPlacement, error) {
		p, _ := newTestPlugin(t)
		return p, nil
	}
	factory := new(int)
	a, err := NewShared().instances.getOrBuild(ctx, factory, "lockstep-scheduler", mustArgs(t), build)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewShared().instances.getOrBuild(ctx, factory, "lockstep-scheduler", mustArgs(t), build)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("two registries' schedulers share one plugin")
	}
}
