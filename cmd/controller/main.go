// Command controller runs the TrainingJob controller (pkg/controller) and,
// in the same manager, scheduler-plugins' PodGroup controller, which keeps
// the phases of the jobs' PodGroups.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	podgroupcontroller "sigs.k8s.io/scheduler-plugins/pkg/controllers"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
	"github.com/lockstep-dev/lockstep/pkg/util/healthcheck"
	"github.com/lockstep-dev/lockstep/pkg/util/securemetrics"
)

type options struct {
	kubeconfig              string
	metrics                 securemetrics.Flags
	healthAddr              string
	leaderElect             bool
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	schedulerName           string
	topologyConfig          string
	clusterDomain           string
	workers                 int
	createParallelism       int
	qps                     float64
	burst                   int
}

func main() {
	var opts options
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	opts.metrics.AddFlags(fs, ":8080")
	fs.StringVar(&opts.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&opts.leaderElect, "leader-elect", true, "run one active replica, elected through a Lease")
	fs.StringVar(&opts.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; the pod's own when empty")
	fs.DurationVar(&opts.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long standbys wait after the leader's last renewal before taking over")
	fs.DurationVar(&opts.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up leading; less than the lease duration")
	fs.DurationVar(&opts.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the lease")
	fs.StringVar(&opts.schedulerName, "scheduler-name", lockstep.SchedulerName, "schedulerName of the jobs' pods")
	fs.StringVar(&opts.topologyConfig, "topology-config", "", "the topology configuration status.placement is rated against: the scheduler's KubeSchedulerConfiguration or a TopologyConfig file (default levels when empty)")
	fs.StringVar(&opts.clusterDomain, "cluster-domain", controller.DefaultClusterDomain, "the cluster's DNS domain; pods resolve their peers by bare name under <job>.<namespace>.svc.<cluster-domain>")
	fs.IntVar(&opts.workers, "workers", 4, "TrainingJobs (and PodGroups) reconciled in parallel")
	fs.IntVar(&opts.createParallelism, "pod-write-parallelism", 64, "pod creations or deletions one job issues at once")
	fs.Float64Var(&opts.qps, "kube-api-qps", 200, "apiserver request rate limit; a 256-pod job is 256 creates")
	fs.IntVar(&opts.burst, "kube-api-burst", 400, "burst above --kube-api-qps")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctrl.SetLogger(klog.NewKlogr())
	ctx := ctrl.SetupSignalHandler()
	if err := run(ctx, opts); err != nil {
		klog.ErrorS(err, "controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(ctx context.Context, opts options) error {
	topo, err := topologyconfig.LoadOrDefault(opts.topologyConfig)
	if err != nil {
		return fmt.Errorf("--topology-config: %w", err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, schedv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(opts.qps), opts.burst

	cacheOpts, clientOpts := controller.ManagerCache()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 opts.metrics.Options(),
		HealthProbeBindAddress:  opts.healthAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        "lockstep-controller.lockstep.dev",
		LeaderElectionNamespace: opts.leaderElectionNamespace,
		LeaseDuration:           &opts.leaseDuration,
		RenewDeadline:           &opts.renewDeadline,
		RetryPeriod:             &opts.retryPeriod,
		Cache:                   cacheOpts,
		Client:                  clientOpts,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready once the caches have synced, on the leader and on standbys
	// alike: a standby with warm caches is ready to take over, and gating
	// readiness on the lease would keep a rolling update from progressing.
	if err := mgr.AddReadyzCheck("informers", healthcheck.CacheSynced(mgr.GetCache(), time.Second)); err != nil {
		return err
	}
	if err := controller.RegisterMetrics(ctrlmetrics.Registry, mgr.GetCache()); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	jobs := &controller.TrainingJobReconciler{
		Client:            mgr.GetClient(),
		Recorder:          mgr.GetEventRecorderFor(controller.ControllerName),
		Registry:          framework.NewBuiltinRegistry(rand.Reader),
		Clock:             clock.RealClock{},
		SchedulerName:     opts.schedulerName,
		ClusterDomain:     opts.clusterDomain,
		Workers:           opts.workers,
		CreateParallelism: opts.createParallelism,
		Topology:          topo,
		APIReader:         mgr.GetAPIReader(),
	}
	if err := jobs.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TrainingJob controller: %w", err)
	}
	podGroups := &podgroupcontroller.PodGroupReconciler{Client: mgr.GetClient(), Scheme: scheme, Workers: opts.workers}
	if err := podGroups.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the PodGroup controller: %w", err)
	}
	klog.FromContext(ctx).Info("Starting", "schedulerName", opts.schedulerName, "leaderElection", opts.leaderElect)
	return mgr.Start(ctx)
}
