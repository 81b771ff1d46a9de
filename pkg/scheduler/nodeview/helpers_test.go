package nodeview

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

var (
	gpuNode              = schedtesting.GPUNode
	nodeInfo             = schedtesting.NodeInfo
	hgxNodeTopology      = schedtesting.HGXNodeTopology
	draNodeTopology      = schedtesting.DRANodeTopology
	gpuSlice             = schedtesting.GPUSlice
	withAllocation       = schedtesting.WithAllocation
	_               Held = (*gangmanager.Books)(nil)
)

// newTestView is a view without a cluster over the gang manager's books
// (what the plugin gives it), on the default levels, judging staleness by
// a fake clock; dra may be nil.
func newTestView(t testing.TB, dra Source) (*View, *gangmanager.Books, *clocktesting.FakeClock) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	books := gangmanager.NewBooks()
	v := New(Config{
		Topology: lockstep.TopologyConfig{Levels: lockstep.DefaultLevels()},
		MaxAge:   5 * time.Minute,
		Held:     books,
		Clock:    clock,
		Logger:   klog.Background(),
		DRA:      dra,
	})
	return v, books, clock
}

// snapshot is Snapshot of pod for gang, asking what the view says it asks.
func (v *View) snapshot(pod *v1.Pod, gang string, infos []fwk.NodeInfo) (*placement.Snapshot, error) {
	return v.Snapshot(pod, gang, v.Request(pod), infos)
}
