// Package localcluster is the local cluster harness that make demo, make
// cluster-up (hack/localcluster), the KWOK benchmark (cmd/lockstep-bench) and
// the e2e suite share. It runs a control plane from the binaries in bin/
// with kwokctl's binary runtime (docs/architecture.md, "Test cluster"), or
// uses an existing cluster named by a kubeconfig; creates a cluster model's
// fake GPU nodes; installs our CRDs and deploy/'s identities; runs our
// binaries as child processes under those identities, keeping their logs;
// and tears down what it started. What only the e2e suite needs (a
// namespace per test, peer operators, replicas, the fault proxy) lives in
// test/e2e/framework, so the commands that link this package carry none of
// it.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
)

// Options configure a test cluster.
type Options struct {
	// RepoRoot is the repository root; deploy/ and bin/ are found under it.
	RepoRoot string
	// Model is the path of the cluster model whose nodes are created.
	Model string
	// Kubeconfig, when set, names an existing cluster to use instead of
	// starting a local one. KWOK must already run there.
	Kubeconfig string
	// Dir holds the cluster's files, logs and rendered configs. Empty means a
	// new temp dir, removed by Stop.
	Dir string
	// Detached components outlive this process (cluster-up).
	Detached bool
	// NodeMonitorGracePeriod, when set, replaces kube-controller-manager's
	// default node-monitor-grace-period (50 s): only for large models on a
	// small machine (ScaleNodeMonitorGracePeriod), never where a test
	// darkens a node.
	NodeMonitorGracePeriod time.Duration
}

// Cluster is a running test cluster with our components.
type Cluster struct {
	Options
	Model *clustermodel.Model
	// Config, Clientset and Client reach the cluster as its admin.
	Config     *rest.Config
	Clientset  kubernetes.Interface
	Client     client.Client
	Kubeconfig string
	// Dir holds everything this cluster wrote; LogDir the component logs.
	Dir    string
	LogDir string

	local   *kwokCluster // nil for an existing cluster
	ownsDir bool

	mu         sync.Mutex
	components map[string]*Process
	// suite describes, by name, the components StartComponents started:
	// those ReviveComponents watches.
	suite   map[string]func() (Component, error)
	stopped bool
}

// Scheme knows every type the tests read or write.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		schedv1alpha1.AddToScheme,
		v1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start brings the cluster up: the model is loaded and validated before any
// cluster work, so a bad model fails fast. On error everything already
// started is torn down again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	model, err := clustermodel.Load(opts.Model)
	if err != nil {
		return nil, err
	}
	c = &Cluster{Options: opts, Model: model, components: map[string]*Process{}}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(context.WithoutCancel(ctx)); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("tearing down after failed start: %w", stopErr))
			}
		}
	}()
	if c.Dir = opts.Dir; c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", TempDirPrefix+"*"); err != nil {
			return c, err
		}
		c.ownsDir = true
	}
	// Checked before c.local is set, so the failed start's teardown leaves the
	// existing cluster alone.
	local := newKWOKCluster(opts.RepoRoot, c.Dir)
	local.nodeMonitorGracePeriod = opts.NodeMonitorGracePeriod
	if _, err := os.Stat(local.clusterDir()); err == nil && opts.Kubeconfig == "" {
		return c, fmt.Errorf("a cluster already runs in %s: stop it first (make cluster-down)", c.Dir)
	}
	c.LogDir = filepath.Join(c.Dir, "logs")
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return c, err
	}
	// The owner file lets hack/e2e.sh find and remove clusters whose test
	// process was killed before it could clean up.
	if err := os.WriteFile(filepath.Join(c.Dir, OwnerFile), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		return c, err
	}

	c.Kubeconfig = opts.Kubeconfig
	if c.Kubeconfig == "" {
		c.local = local
		if err := os.MkdirAll(c.local.workdir, 0o755); err != nil {
			return c, err
		}
		if err := c.local.create(ctx); err != nil {
			return c, err
		}
		c.Kubeconfig = c.local.kubeconfig()
	}
	if err := c.connect(ctx); err != nil {
		return c, err
	}
	// kube-controller-manager waits 20 s for a healthy apiserver when it
	// starts, then exits; a loaded machine's apiserver has taken longer.
	// A kubelet would start it again: so does the harness, now that the
	// apiserver is ready.
	if _, err := c.restartExited(ctx); err != nil {
		return c, err
	}
	if err := c.InstallCRDs(ctx); err != nil {
		return c, err
	}
	if err := c.InstallNVIDIADRADriver(ctx); err != nil {
		return c, err
	}
	// The components run as their deploy/ ServiceAccounts, not as admin.
	if err := c.InstallIdentities(ctx); err != nil {
		return c, err
	}
	if err := c.CreateNodes(ctx, model.Nodes()); err != nil {
		return c, err
	}
	// Every fake node runs what every real node does before any gang
	// lands: pods that outrank all work (deploy/kwok/node-critical.yaml).
	if err := c.InstallNodeCritical(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// connect builds clients and waits for the apiserver to report ready.
func (c *Cluster) connect(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w", c.Kubeconfig, err)
	}
	// Node creation for the scale model and bursts of pods need headroom over
	// client-go's default 5 QPS.
	cfg.QPS, cfg.Burst = 500, 1000
	c.Config = cfg
	if c.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// waitReady waits for the apiserver to report ready.
func (c *Cluster) waitReady(ctx context.Context) error {
	return Poll(ctx, 200*time.Millisecond, 2*time.Minute, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		body, err := c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// Local reports whether the harness runs the control plane itself.
func (c *Cluster) Local() bool { return c.local != nil }

// ControlPlanePIDs returns the process ids of the local control plane by
// component; empty for an existing cluster.
func (c *Cluster) ControlPlanePIDs() (map[string]int, error) {
	if c.local == nil {
		return map[string]int{}, nil
	}
	return c.local.pids()
}

// Stop stops our components, removes the model's nodes from an existing
// cluster or deletes the local one, and removes the temp dir. It is safe to
// call more than once and from a signal handler.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	for name, p := range c.components {
		if err := p.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
		delete(c.components, name)
	}
	if c.local != nil {
		if err := c.local.delete(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if c.Clientset != nil && c.Model != nil {
		errs = append(errs, c.DeleteNodes(ctx, c.Model.Nodes()))
	}
	if c.ownsDir && c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// StopDetached stops a cluster that cluster-up left running in dir: our
// components from their pid files, then the local control plane, then the
// directory itself.
func StopDetached(ctx context.Context, repoRoot, dir string) error {
	var errs []error
	pidFiles, _ := filepath.Glob(filepath.Join(dir, detachedPIDDir, "*.pid"))
	for _, f := range pidFiles {
		errs = append(errs, KillPIDFile(f, 10*time.Second))
	}
	local := newKWOKCluster(repoRoot, dir)
	if _, err := os.Stat(local.clusterDir()); err == nil {
		errs = append(errs, local.delete(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// SaveArtifacts copies every log (our components, kwokctl, the control
// plane) into dir, for a failed run.
func (c *Cluster) SaveArtifacts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(c.LogDir, "*"))
	if c.local != nil {
		files = append(files, c.local.logFiles()...)
		files = append(files, filepath.Join(c.local.clusterDir(), "kwok.yaml"))
	}
	var errs []error
	for _, f := range files {
		errs = append(errs, copyFile(f, filepath.Join(dir, filepath.Base(f))))
	}
	return errors.Join(errs...)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

const (
	// TempDirPrefix names the temp dirs of test clusters.
	TempDirPrefix = "lockstep-e2e-"
	// OwnerFile in a cluster dir holds the pid of the process that made it.
	OwnerFile = "owner.pid"
)
