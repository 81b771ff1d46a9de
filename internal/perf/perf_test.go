package perf

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	lsenvtest "github.com/lockstep-dev/lockstep/pkg/util/envtest"
)

// TestSmoke runs the measurement at a small size, so the in-process
// benchmark keeps working between the full runs of `make bench-scale`: each
// scheduler binds every pod of the burst once, and the result reports a
// rate and a heap peak for each.
func TestSmoke(t *testing.T) {
	root, model := smallModel(t)
	stallAfter = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Four gangs are 18 pods of 8 GPUs (bench.ScaleGangSizes): 144 of the
	// model's 256 GPUs.
	res, err := Measure(ctx, Config{Root: root, Model: model, Gangs: 4, GPUsPerPod: 8, Rounds: 1, Timeout: 2 * time.Minute, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if res.Nodes != model.NodeCount() || res.Pods != 18 {
		t.Errorf("measured %d nodes and %d pods, want %d and 18", res.Nodes, res.Pods, model.NodeCount())
	}
	for _, sched := range Schedulers {
		rate, heap, _ := res.Median(sched)
		if rate <= 0 || heap == 0 {
			t.Errorf("%s: %.1f pods/s, peak heap %d bytes; want both above zero (runs: %+v)", sched, rate, heap, res.Runs)
		}
	}
	if got, want := len(res.Runs), len(Schedulers); got != want {
		t.Errorf("%d runs, want %d", got, want)
	}
}

// smallModel is the module root and the 32-node model the perf tests run on.
func smallModel(t *testing.T) (string, *clustermodel.Model) {
	t.Helper()
	root, err := lsenvtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	model, err := clustermodel.Load(filepath.Join(root, "test", "e2e", "models", "hgx-32.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return root, model
}
