package main

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
)

// runReal publishes this node's topology. It reads the API directly, not
// through a cache: a DaemonSet pod watching every Node and NodeTopology of
// the cluster would cost each node a full copy.
func runReal(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts options) error {
	discoveryOpts := discovery.Options{
		NVML:               discovery.NewNVML(),
		SysfsRoot:          opts.sysfsRoot,
		PodResourcesSocket: opts.podResourcesSocket,
	}
	if opts.hcas != "" {
		discoveryOpts.HCAs = strings.Split(opts.hcas, ",")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                opts.metrics.Options(),
		HealthProbeBindAddress: opts.healthAddr,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	metrics, err := agent.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	publisher := &agent.Publisher{Client: c, Clock: clock.RealClock{}, HeartbeatInterval: opts.heartbeat, Mode: "real", Metrics: metrics}
	// Ready once this node's NodeTopology is published: before that the
	// scheduler cannot place gangs on it.
	if err := addHealthChecks(mgr, map[string]healthz.Checker{"published": publisher.Ready}); err != nil {
		return err
	}
	realAgent := &agent.RealAgent{
		Client:    c,
		Publisher: publisher,
		NodeName:  opts.nodeName,
		Backend:   discovery.NVMLBackend{Options: discoveryOpts},
		Interval:  opts.resyncInterval,
		Metrics:   metrics,
	}
	// The agent's own errors end the manager, so a failed first discovery
	// exits the process non-zero.
	if err := mgr.Add(manager.RunnableFunc(realAgent.Run)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
