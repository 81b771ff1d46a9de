package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// scheduler is one scheduler under test: how to run it on a cluster and the
// schedulerName the controller gives the pods it should place.
type scheduler struct {
	// Name is how the report calls it.
	Name string
	// PodSchedulerName is the pods' spec.schedulerName.
	PodSchedulerName string
	// config is the scheduler's KubeSchedulerConfiguration.
	config map[string]any
	// component describes the scheduler process on c.
	component func(c *localcluster.Cluster) (localcluster.Component, error)
}

// coschedulingSchedulerName is the profile name of the Coscheduling-only
// scheduler.
const coschedulingSchedulerName = "coscheduling"

// schedulers are the schedulers the benchmark knows, in report order; lockstep
// runs with lockstepConfig.
func schedulers(lockstepConfig map[string]any) []scheduler {
	backoff := replayBackoff(lockstepConfig)
	// The upstream kube-scheduler binary at our Kubernetes pin with its
	// default profile: no gangs, no topology; DefaultPreemption evicts pods
	// for a higher-priority pod.
	kube := schedulerConfig(backoff, map[string]any{
		"schedulerName": localcluster.DefaultSchedulerName,
	})
	// scheduler-plugins' Coscheduling with its own defaults (60 s Permit
	// wait, no PodGroup backoff), as its documentation sets it up:
	// Coscheduling orders the queue and gates Permit; every other plugin is
	// kube-scheduler's default, DefaultPreemption included (it runs before
	// Coscheduling's PostFilter: multiPoint plugins follow the defaults).
	cosched := schedulerConfig(backoff, map[string]any{
		"schedulerName": coschedulingSchedulerName,
		"plugins": map[string]any{
			"queueSort": map[string]any{
				"enabled":  []any{map[string]any{"name": "Coscheduling"}},
				"disabled": []any{map[string]any{"name": "*"}},
			},
			"multiPoint": map[string]any{
				"enabled": []any{map[string]any{"name": "Coscheduling"}},
			},
		},
	})
	return []scheduler{
		{
			Name:             bench.SchedulerKube,
			PodSchedulerName: localcluster.DefaultSchedulerName,
			config:           kube,
			component: func(c *localcluster.Cluster) (localcluster.Component, error) {
				return c.KubeSchedulerComponent("scheduler", "kube-scheduler", kube)
			},
		},
		{
			Name:             bench.SchedulerCoscheduling,
			PodSchedulerName: coschedulingSchedulerName,
			config:           cosched,
			component: func(c *localcluster.Cluster) (localcluster.Component, error) {
				return c.KubeSchedulerComponent("scheduler", lockstep.SchedulerName, cosched)
			},
		},
		{
			// Lockstep as deployed (deploy/scheduler/config.yaml), its
			// Preferred wait on the replay's clock: see compressedConfig.
			Name:             bench.SchedulerLockstep,
			PodSchedulerName: localcluster.SchedulerName,
			config:           lockstepConfig,
			component: func(c *localcluster.Cluster) (localcluster.Component, error) {
				return c.KubeSchedulerComponent("scheduler", lockstep.SchedulerName, lockstepConfig)
			},
		},
	}
}

// defaultPreemption is the name of upstream's preemption plugin.
const defaultPreemption = "DefaultPreemption"

// keepsDefaultPreemption reports whether every profile of cfg keeps
// upstream's DefaultPreemption: neither its multiPoint nor its postFilter
// plugins disable it or "*". Every default profile does; the priority
// replay's report says which schedulers preempt this way.
func keepsDefaultPreemption(cfg map[string]any) bool {
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) == 0 {
		return false
	}
	for _, p := range profiles {
		profile, _ := p.(map[string]any)
		plugins, _ := profile["plugins"].(map[string]any)
		for _, point := range []string{"multiPoint", "postFilter"} {
			set, _ := plugins[point].(map[string]any)
			disabled, _ := set["disabled"].([]any)
			for _, d := range disabled {
				name, _ := d.(map[string]any)["name"].(string)
				if name == defaultPreemption || name == "*" {
					return false
				}
			}
		}
	}
	return true
}

// compressedConfig returns deploy/'s lockstep-scheduler configuration with
// TopologyPlacement's preferredWait set to wait (trace time; the deployed
// value when wait is negative) divided by the time compression, the wait it
// set and the deployed wait. The wait trades a gang's start against a
// tighter placement in units of the jobs' own time, so when the trace's
// submit times and durations are compressed it is compressed with them;
// left at 30 s, a 60× replay would make Lockstep wait the equivalent of 30
// minutes per level.
func compressedConfig(root string, compression float64, wait time.Duration) (cfg map[string]any, scaled, deployed time.Duration, err error) {
	cfg, err = localcluster.DeployedSchedulerConfig(root)
	if err != nil {
		return nil, 0, 0, err
	}
	if deployed, err = localcluster.DeployedPreferredWait(root); err != nil {
		return nil, 0, 0, err
	}
	all := localcluster.TopologyPlacementArgs(cfg)
	if wait < 0 {
		wait = deployed
	}
	scaled = time.Duration(float64(wait) / compression).Round(time.Millisecond)
	// Every profile (lockstep-scheduler and its scheduler-plugins-scheduler
	// alias): they share one plugin instance, which the scheduler refuses
	// to build from differing args.
	for _, args := range all {
		args["preferredWait"] = scaled.String()
	}
	setReplayBackoff(cfg, compression)
	return cfg, scaled, deployed, nil
}

// The scheduler's pod backoff, as kube-scheduler defaults it: 1 s after a
// pod's first failed attempt, doubling up to 10 s.
const (
	defaultPodInitialBackoff = time.Second
	defaultPodMaxBackoff     = 10 * time.Second
)

// setReplayBackoff sets cfg's pod backoff to the defaults divided by the
// time compression, floored at the 1 s the configuration API allows, and
// records the compression (replayBackoff). Left at 10 s, a pod that failed
// a few attempts would sit out the equivalent of 10 minutes of a 60×
// replay after capacity frees, idling the GPUs a waiting gang needs; every
// scheduler of a replay gets the same backoff.
func setReplayBackoff(cfg map[string]any, compression float64) {
	backoff := func(d time.Duration) int64 {
		return max(1, int64(math.Round(d.Seconds()/compression)))
	}
	cfg["podInitialBackoffSeconds"] = backoff(defaultPodInitialBackoff)
	cfg["podMaxBackoffSeconds"] = backoff(defaultPodMaxBackoff)
}

// replayBackoff returns a configuration made by compressedConfig with its
// backoff, to give the other schedulers the same: nil when cfg has none.
func replayBackoff(cfg map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"podInitialBackoffSeconds", "podMaxBackoffSeconds"} {
		if v, ok := cfg[k]; ok {
			out[k] = v
		}
	}
	return out
}

// parseWaits reads the comma-separated durations of --sweep-preferred-wait,
// in order, without duplicates; "" is none.
func parseWaits(list string) ([]time.Duration, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var waits []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration of at least 0: write Go durations, e.g. 0s,30s,2m", f)
		}
		if !slices.Contains(waits, d) {
			waits = append(waits, d)
		}
	}
	return waits, nil
}

// schedulerConfig is a KubeSchedulerConfiguration with one profile and the
// top-level settings of base (the replay's backoff, replayBackoff).
func schedulerConfig(base, profile map[string]any) map[string]any {
	cfg := map[string]any{
		"apiVersion": "kubescheduler.config.k8s.io/v1",
		"kind":       "KubeSchedulerConfiguration",
		"profiles":   []any{profile},
	}
	for k, v := range base {
		cfg[k] = v
	}
	return cfg
}

// selectSchedulers returns the named schedulers in report order, or an error
// naming the unknown ones and the known ones.
func selectSchedulers(list string, lockstepConfig map[string]any) ([]scheduler, error) {
	all := schedulers(lockstepConfig)
	var known []string
	for _, s := range all {
		known = append(known, s.Name)
	}
	want := strings.Split(list, ",")
	var unknown []string
	for _, w := range want {
		if !slices.Contains(known, strings.TrimSpace(w)) {
			unknown = append(unknown, w)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown scheduler(s) %q; known: %s", unknown, strings.Join(known, ", "))
	}
	var out []scheduler
	for _, s := range all {
		for _, w := range want {
			if strings.TrimSpace(w) == s.Name {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}
