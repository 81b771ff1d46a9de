package controller

// The envtest harness: one kube-apiserver and etcd (the ones `make tools`
// builds into bin/) with the CRDs of deploy/crds, and one manager running
// the TrainingJob controller against them, as cmd/controller wires it. It is
// started by the first test that asks for it and stopped by TestMain, so
// the package's plain unit tests neither need the binaries nor pay for the
// apiserver.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	lsenvtest "github.com/lockstep-dev/lockstep/pkg/util/envtest"
)

// envtestWait bounds every wait on the apiserver. Generous, for a loaded
// 2-core CI machine; a passing wait returns as soon as its condition holds.
const envtestWait = 60 * time.Second

// harness is the shared apiserver and manager.
var harness struct {
	once sync.Once
	err  error

	env *envtest.Environment
	cfg *rest.Config
	// api reads and writes the apiserver directly, not through the
	// manager's cache: what the tests assert on is what the apiserver holds.
	api client.Client

	// cdAPI: the ComputeDomain CRD is installed (computedomain_envtest_test.go).
	cdAPI bool

	cancel  context.CancelFunc
	stopped chan struct{}
	mgrErr  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopEnvtest(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// startEnvtest starts the apiserver and the manager, once. Missing
// binaries are an error, not a skip: `make unit` builds them first.
func startEnvtest(t *testing.T) {
	t.Helper()
	harness.once.Do(func() { harness.err = doStartEnvtest() })
	if harness.err != nil {
		t.Fatalf("envtest: %v", harness.err)
	}
}

func doStartEnvtest() error {
	root, err := lsenvtest.ModuleRoot()
	if err != nil {
		return err
	}
	// As cmd/controller logs; go test shows it only for failures and -v.
	ctrl.SetLogger(klog.NewKlogr())

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, schedv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	env, cfg, err := lsenvtest.Start(root, scheme)
	if err != nil {
		return err
	}
	harness.env, harness.cfg = env, cfg
	if harness.api, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}

	cacheOpts, clientOpts := ManagerCache()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
		Client:                 clientOpts,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &TrainingJobReconciler{
		Client:            mgr.GetClient(),
		Recorder:          mgr.GetEventRecorderFor(ControllerName),
		Registry:          framework.NewBuiltinRegistry(rand.Reader),
		SchedulerName:     lockstep.SchedulerName,
		ClusterDomain:     DefaultClusterDomain,
		Workers:           2,
		CreateParallelism: 8,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TrainingJob controller: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	harness.cancel = cancel
	harness.stopped = make(chan struct{})
	go func() {
		defer close(harness.stopped)
		harness.mgrErr = mgr.Start(ctx)
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, envtestWait)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return errors.New("the manager's cache did not sync")
	}
	return nil
}

// stopEnvtest stops the manager, then the apiserver and etcd.
func stopEnvtest() error {
	if harness.env == nil {
		return nil
	}
	var errs []error
	if harness.cancel != nil {
		harness.cancel()
		select {
		case <-harness.stopped:
			if harness.mgrErr != nil {
				errs = append(errs, fmt.Errorf("manager: %w", harness.mgrErr))
			}
		case <-time.After(envtestWait):
			errs = append(errs, errors.New("the manager did not stop"))
		}
	}
	if err := harness.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("apiserver: %w", err))
	}
	return errors.Join(errs...)
}

// envtestNamespace starts the harness and creates a namespace of the
// test's own. Namespaces are not deleted: envtest runs no namespace
// controller to empty them, and the apiserver goes with the test binary.
func envtestNamespace(t *testing.T) string {
	t.Helper()
	startEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "envtest-"}}
	if err := harness.api.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// eventually polls cond until it holds, failing the test with what it last
// saw when it does not within envtestWait. cond returns whether it holds
// and a description of what it saw; an error ends the wait at once.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), envtestWait)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, saw, err := cond(ctx)
		last = saw
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last saw: %s", what, err, last)
	}
}
