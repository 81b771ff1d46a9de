package topologyplacement

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// One scheduler, one plugin. kube-scheduler builds a framework, and so a
// plugin instance, per profile, while every profile schedules onto the same
// nodes from one cache, one queue and one map of waiting pods. The plugin's
// books of held GPUs are state about the nodes, not about a profile: were
// each profile's instance to keep its own, a gang of one profile could be
// planned onto GPUs a gang of the other holds, and a GPU given twice. So
// every profile that enables TopologyPlacement (deploy/'s lockstep-scheduler
// and its scheduler-plugins-scheduler alias) gets the same instance: one set
// of books, one NodeTopology cache, one plan sweep and one set of gauges.
//
// Sharing the instance needs the profiles to agree on its args: the sweep
// drops plans by one planTTL, and plans are made on one set of levels.
// Profiles that configure it differently are refused at startup.

// Shared is what the profiles of a scheduler share: its one plugin
// instance. The scheduler's registry (pkg/scheduler.OutOfTree) makes one
// and registers its New as TopologyPlacement's factory, so the sharing is
// an object passed through the registry, not a package variable: two
// registries (two schedulers, or the benchmark's rounds) share nothing.
type Shared struct {
	instances *instances
}

// NewShared returns a Shared with no instance yet.
func NewShared() *Shared { return &Shared{instances: newInstances()} }

// instances maps a scheduler to its plugin. A scheduler is known by the
// informer factory it gives every profile's framework: profiles of one
// scheduler share it, and separate schedulers in one process (tests) do not.
type instances struct {
	mu sync.Mutex
	by map[any]*instance
}

// instance is a scheduler's plugin, the args it was built with and the
// profile that built it, for naming it in errors.
type instance struct {
	plugin  *TopologyPlacement
	args    *Args
	profile string
}

func newInstances() *instances { return &instances{by: map[any]*instance{}} }

// getOrBuild returns the plugin of the scheduler known by key: the one an
// earlier profile built, when its args are the same, or a new one from
// build. The entry is forgotten when ctx (the scheduler's) ends, so a
// scheduler started again in the same process builds afresh.
func (r *instances) getOrBuild(ctx context.Context, key any, profile string, args *Args, build func() (*TopologyPlacement, error)) (*TopologyPlacement, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if have, ok := r.by[key]; ok {
		if !reflect.DeepEqual(have.args, args) {
			return nil, fmt.Errorf("profiles %q and %q configure %s with different args; the profiles of one scheduler share one %s (one set of books of held GPUs), so give every profile the same pluginConfig args", have.profile, profile, Name, Name)
		}
		return have.plugin, nil
	}
	p, err := build()
	if err != nil {
		return nil, err
	}
	r.by[key] = &instance{plugin: p, args: args, profile: profile}
	go func() {
		<-ctx.Done()
		r.forget(key, p)
	}()
	return p, nil
}

// forget drops key's entry if it still holds p.
func (r *instances) forget(key any, p *TopologyPlacement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if have, ok := r.by[key]; ok && have.plugin == p {
		delete(r.by, key)
	}
}

// profileName returns the name of the profile whose framework h is, or ""
// when h does not say (the framework's handle does).
func profileName(h framework.Handle) string {
	if named, ok := h.(interface{ ProfileName() string }); ok {
		return named.ProfileName()
	}
	return ""
}
