package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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

// realOptions are discovery's options for this node.
func realOptions(opts options) discovery.Options {
	o := discovery.Options{
		NVML:               discovery.NewNVML(),
		SysfsRoot:          opts.sysfsRoot,
		PodResourcesSocket: opts.podResourcesSocket,
	}
	if opts.hcas != "" {
		o.HCAs = strings.Split(opts.hcas, ",")
	}
	return o
}

// discoverOnce writes this node's discovery report to w as JSON and, with
// --record-nvml, its NVML answers to a file. It runs the same discovery as
// the published one, so what it prints is what the agent would publish.
func discoverOnce(ctx context.Context, opts options, w io.Writer) error {
	if opts.mode != "real" {
		return fmt.Errorf("--once: --mode=%q: only the real mode discovers a node", opts.mode)
	}
	dopts := realOptions(opts)
	report, err := discovery.Discover(ctx, dopts)
	if err != nil {
		return err
	}
	if opts.sanitize {
		report = report.Sanitize()
	}
	b, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
		return err
	}
	if opts.recordNVML == "" {
		return nil
	}
	rec, err := discovery.Record(dopts.NVML, machineDescription(report))
	if err != nil {
		return fmt.Errorf("--record-nvml: %w", err)
	}
	if opts.sanitize {
		if rec, err = rec.Sanitize(); err != nil {
			return fmt.Errorf("--record-nvml: %w", err)
		}
	}
	if b, err = json.MarshalIndent(rec, "", "  "); err != nil {
		return fmt.Errorf("--record-nvml: encoding: %w", err)
	}
	return os.WriteFile(opts.recordNVML, append(b, '\n'), 0o644)
}

// machineDescription names the recorded machine by its GPUs, e.g.
// "1× NVIDIA-H100-80GB-HBM3".
func machineDescription(r *discovery.Report) string {
	counts := map[string]int{}
	var products []string
	for _, g := range r.Topology.GPUs {
		if counts[g.Product] == 0 {
			products = append(products, g.Product)
		}
		counts[g.Product]++
	}
	var parts []string
	for _, p := range products {
		parts = append(parts, fmt.Sprintf("%d× %s", counts[p], p))
	}
	return strings.Join(parts, ", ")
}

// runReal publishes this node's topology. It reads the API directly, not
// through a cache: a DaemonSet pod watching every Node and NodeTopology of
// the cluster would cost each node a full copy.
func runReal(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts options) error {
	discoveryOpts := realOptions(opts)
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
