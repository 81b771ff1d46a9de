// Command topology-agent publishes GPU nodes' hardware topology and GPU
// allocation as NodeTopology objects (see pkg/agent).
//
//	--mode=real  one agent per GPU node (DaemonSet): NVML, sysfs and the
//	             kubelet's pod-resources API describe this node.
//	--mode=fake  one agent for many simulated nodes: each node's hardware
//	             profile label describes it, and GPU allocation of pods bound
//	             there is emulated: --fake-allocation=scheduler honours the
//	             scheduler's lockstep.dev/gpus, device-plugin ignores it as
//	             the stock NVIDIA device plugin does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
	"github.com/lockstep-dev/lockstep/pkg/util/healthcheck"
	"github.com/lockstep-dev/lockstep/pkg/util/securemetrics"
)

type options struct {
	mode               string
	kubeconfig         string
	nodeName           string
	nodeSelector       string
	topologyConfig     string
	heartbeat          time.Duration
	workers            int
	fakeAllocation     string
	metrics            securemetrics.Flags
	healthAddr         string
	podResourcesSocket string
	sysfsRoot          string
	hcas               string
	resyncInterval     time.Duration
	qps                float64
	burst              int
	once               bool
	sanitize           bool
	recordNVML         string
}

func main() {
	var opts options
	fs := flag.NewFlagSet("topology-agent", flag.ExitOnError)
	fs.StringVar(&opts.mode, "mode", "real", "real: discover this node with NVML; fake: serve the simulated nodes matching --node-selector")
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&opts.nodeName, "node-name", os.Getenv("NODE_NAME"), "real mode: this node's name (set NODE_NAME from the downward API)")
	fs.StringVar(&opts.nodeSelector, "node-selector", lockstep.LabelProfile, "fake mode: label selector of the nodes to serve")
	fs.StringVar(&opts.topologyConfig, "topology-config", "", "fake mode: the cluster's topology configuration (the scheduler's KubeSchedulerConfiguration or a TopologyConfig file), whose NVLink level's label places simulated nodes in NVLink domains; default levels when empty")
	fs.DurationVar(&opts.heartbeat, "heartbeat-interval", time.Minute, "how often an unchanged NodeTopology is confirmed")
	fs.IntVar(&opts.workers, "workers", 4, "fake mode: nodes reconciled in parallel")
	fs.StringVar(&opts.fakeAllocation, "fake-allocation", lockstep.FakeAllocationScheduler, "fake mode: how the emulated device plugin picks a pod's GPUs: "+lockstep.FakeAllocationScheduler+" (the scheduler's "+lockstep.AnnotationGPUs+" when free) or "+lockstep.FakeAllocationDevicePlugin+" (as the stock NVIDIA device plugin: ignores the annotation and picks its own free set)")
	opts.metrics.AddFlags(fs, ":8080")
	fs.StringVar(&opts.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&opts.podResourcesSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "real mode: the kubelet's pod-resources API socket")
	fs.StringVar(&opts.sysfsRoot, "sysfs-root", "/sys", "real mode: where sysfs is mounted")
	fs.StringVar(&opts.hcas, "hcas", "", "real mode: comma-separated RDMA device patterns for the compute NICs (e.g. mlx5_*); empty means every device with an active port")
	fs.DurationVar(&opts.resyncInterval, "resync-interval", lockstep.AgentResyncInterval, "how often GPU allocation (and, in real mode, hardware) is read: pods' GPUs are reported at the first read after they change; fake mode holds a change back until its node's next read, as the real agent would report it (0: at once)")
	fs.Float64Var(&opts.qps, "kube-api-qps", 100, "fake mode publishes ~3 writes per node at start: the apiserver request rate limit")
	fs.IntVar(&opts.burst, "kube-api-burst", 200, "burst above --kube-api-qps")
	fs.BoolVar(&opts.once, "once", false, "real mode: discover this node once, print the report as JSON on stdout and exit, without contacting the API server (what the agent would publish, for checking a node by hand)")
	fs.BoolVar(&opts.sanitize, "sanitize", false, "with --once: replace GPU UUIDs, the NVLink cluster UUID, HCA GUIDs and pod names by placeholders, so the output can be shared or committed as a test fixture")
	fs.StringVar(&opts.recordNVML, "record-nvml", "", "with --once: also write every answer of this node's NVML (sanitized with --sanitize) to this file, a fixture that pkg/agent/discovery's tests replay")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctrl.SetLogger(klog.NewKlogr())
	ctx := ctrl.SetupSignalHandler()
	if opts.once {
		if err := discoverOnce(ctx, opts, os.Stdout); err != nil {
			klog.ErrorS(err, "topology-agent --once failed")
			klog.Flush()
			os.Exit(1)
		}
		return
	}
	if opts.sanitize || opts.recordNVML != "" {
		klog.ErrorS(nil, "--sanitize and --record-nvml need --once")
		klog.Flush()
		os.Exit(2)
	}
	if err := run(ctx, opts); err != nil {
		klog.ErrorS(err, "topology-agent failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, opts options) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(opts.qps), opts.burst
	switch opts.mode {
	case "fake":
		return runFake(ctx, cfg, scheme, opts)
	case "real":
		return runReal(ctx, cfg, scheme, opts)
	default:
		return fmt.Errorf("--mode=%q: want real or fake", opts.mode)
	}
}

func runFake(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts options) error {
	selector, err := labels.Parse(opts.nodeSelector)
	if err != nil {
		return fmt.Errorf("--node-selector: %w", err)
	}
	topo, err := topologyconfig.LoadOrDefault(opts.topologyConfig)
	if err != nil {
		return fmt.Errorf("--topology-config: %w", err)
	}
	switch opts.fakeAllocation {
	case lockstep.FakeAllocationScheduler, lockstep.FakeAllocationDevicePlugin:
	default:
		return fmt.Errorf("--fake-allocation=%q: want %s or %s", opts.fakeAllocation, lockstep.FakeAllocationScheduler, lockstep.FakeAllocationDevicePlugin)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                opts.metrics.Options(),
		HealthProbeBindAddress: opts.healthAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only the served nodes are cached, which matters on a shared
			// cluster with real nodes.
			&corev1.Node{}: {Label: selector},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	metrics, err := agent.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	reconciler := &agent.FakeReconciler{
		Client:       mgr.GetClient(),
		Publisher:    &agent.Publisher{Client: mgr.GetClient(), Clock: clock.RealClock{}, HeartbeatInterval: opts.heartbeat, Mode: "fake", Metrics: metrics},
		Recorder:     mgr.GetEventRecorderFor("topology-agent"),
		NodeSelector: selector,
		Workers:      opts.workers,
		Allocation:   opts.fakeAllocation,
		Metrics:      metrics,
		Topology:     topo,
		// The real agent's read interval, so the local cluster's
		// NodeTopology lags the pods as a real cluster's does.
		ResyncInterval: opts.resyncInterval,
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := setupComputeDomainDriver(ctx, mgr, selector, topo); err != nil {
		return err
	}
	if err := addHealthChecks(mgr, map[string]healthz.Checker{
		"informers": healthcheck.CacheSynced(mgr.GetCache(), time.Second),
		"published": reconciler.Ready,
	}); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving fake nodes", "selector", selector.String(), "allocation", opts.fakeAllocation)
	return mgr.Start(ctx)
}

// setupComputeDomainDriver plays NVIDIA's DRA driver for ComputeDomains
// (pkg/agent/computedomain.go): channel slices on the multi-node NVLink
// nodes, and the driver's controller where the ComputeDomain CRD is
// installed when the agent starts (the local cluster installs it first).
func setupComputeDomainDriver(ctx context.Context, mgr ctrl.Manager, selector labels.Selector, topo lockstep.TopologyConfig) error {
	slices := &agent.ChannelSliceReconciler{Client: mgr.GetClient(), NodeSelector: selector, Topology: topo}
	if err := slices.SetupWithManager(mgr); err != nil {
		return err
	}
	if _, err := mgr.GetRESTMapper().RESTMapping(computedomain.GVK.GroupKind(), computedomain.GroupVersion.Version); err != nil {
		klog.FromContext(ctx).Info("No ComputeDomain CRD: ComputeDomains are not played", "err", err)
		return nil
	}
	standIn := &agent.ComputeDomainStandIn{Client: mgr.GetClient(), Topology: topo}
	return standIn.SetupWithManager(mgr)
}

// addHealthChecks serves a liveness ping on /healthz and the ready checks
// on /readyz.
func addHealthChecks(mgr ctrl.Manager, ready map[string]healthz.Checker) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	for name, check := range ready {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return err
		}
	}
	return nil
}
