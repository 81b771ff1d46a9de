package scheduler

import (
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	// Registers CoschedulingArgs with the scheduler's config scheme so the
	// plugins' args decode from the configuration.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"

	lockstepcoscheduling "github.com/lockstep-dev/lockstep/pkg/scheduler/coscheduling"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
)

// OutOfTree are the plugins lockstep-scheduler adds to kube-scheduler's,
// as options of app.NewSchedulerCommand or app.Setup: cmd/scheduler and the
// in-process benchmark (internal/perf) build the same scheduler.
func OutOfTree() []app.Option {
	return []app.Option{
		// Stock Coscheduling, for the benchmark's baseline profile.
		app.WithPlugin(coscheduling.Name, coscheduling.New),
		// Coscheduling with QueueingHints on the events that free capacity,
		// as deploy/scheduler/config.yaml uses it.
		app.WithPlugin(lockstepcoscheduling.Name, lockstepcoscheduling.New),
		// Every profile of the scheduler gets the one TopologyPlacement of
		// this registry: gangs of two profiles never share a GPU.
		app.WithPlugin(topologyplacement.Name, topologyplacement.NewShared().New),
	}
}
