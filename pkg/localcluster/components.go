package localcluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/lockstep/topologyconfig"
)

// Component is one of our binaries run against the cluster.
type Component struct {
	// Name identifies the component and names its log file.
	Name string
	// Binary is the file name in bin/.
	Binary string
	Args   []string
	// HealthURL, when set, must answer 200 before the component counts as
	// started.
	HealthURL string
	// Env is added to the harness's environment (peers configured by
	// environment variables, as their Deployments are).
	Env []string
}

// detachedPIDDir holds the pid files of detached components, under Dir.
const detachedPIDDir = "pids"

// SchedulerName is the scheduler name of Lockstep's profile.
const SchedulerName = lockstep.SchedulerName

// StartComponent starts comp and waits for its health endpoint.
func (c *Cluster) StartComponent(ctx context.Context, comp Component) (*Process, error) {
	c.mu.Lock()
	if _, running := c.components[comp.Name]; running {
		c.mu.Unlock()
		return nil, fmt.Errorf("component %s is already running", comp.Name)
	}
	c.mu.Unlock()
	bin := filepath.Join(c.RepoRoot, "bin", comp.Binary)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("component %s: %w (run make build)", comp.Name, err)
	}
	p, err := StartProcess(comp.Name, c.LogDir, bin, comp.Args, StartOptions{Detached: c.Detached, Env: comp.Env})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.components[comp.Name] = p
	c.mu.Unlock()
	if c.Detached {
		// cluster-down finds detached components through their pid files.
		pidDir := filepath.Join(c.Dir, detachedPIDDir)
		if err := os.MkdirAll(pidDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(pidDir, comp.Name+".pid"), fmt.Appendf(nil, "%d\n", p.Pid()), 0o644); err != nil {
			return nil, err
		}
	}
	if comp.HealthURL != "" {
		if err := waitHealthy(ctx, p, comp.HealthURL); err != nil {
			return nil, fmt.Errorf("component %s: %w (log: %s)", comp.Name, err, p.LogPath)
		}
	}
	return p, nil
}

// KillComponent ends a component with SIGKILL, as a crash would.
func (c *Cluster) KillComponent(name string) error {
	p, err := c.takeComponent(name)
	if err != nil {
		return err
	}
	return p.Kill()
}

// takeComponent removes a running component from the cluster's books, for
// its caller to end.
func (c *Cluster) takeComponent(name string) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.components[name]
	if !ok {
		return nil, fmt.Errorf("component %s is not running", name)
	}
	delete(c.components, name)
	return p, nil
}

// StopComponent stops a component with SIGTERM, as a rolling update would,
// and waits up to grace before killing it.
func (c *Cluster) StopComponent(name string, grace time.Duration) error {
	p, err := c.takeComponent(name)
	if err != nil {
		return err
	}
	return p.Stop(grace)
}

// Forget drops a component that exited by itself from the running ones, so
// it can be started again under its name. It reports whether it had exited.
func (c *Cluster) Forget(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.components[name]
	if !ok {
		return false
	}
	if exited, _ := p.Exited(); !exited {
		return false
	}
	delete(c.components, name)
	return true
}

// Component returns a running component's process.
func (c *Cluster) Component(name string) (*Process, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.components[name]
	return p, ok
}

// ComponentPIDs returns the process ids of our running components by name.
func (c *Cluster) ComponentPIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for name, p := range c.components {
		out[name] = p.Pid()
	}
	return out
}

// SchedulerComponent describes lockstep-scheduler run with deploy/'s
// configuration, pointed at this cluster as its ServiceAccount and serving
// health on loopback.
func (c *Cluster) SchedulerComponent() (Component, error) {
	cfg, err := DeployedSchedulerConfig(c.RepoRoot)
	if err != nil {
		return Component{}, err
	}
	return c.KubeSchedulerComponent("scheduler", lockstep.SchedulerName, cfg)
}

// DeployedSchedulerConfig reads deploy/'s KubeSchedulerConfiguration of
// lockstep-scheduler, for callers that adjust it before
// KubeSchedulerComponent.
func DeployedSchedulerConfig(repoRoot string) (map[string]any, error) {
	src := filepath.Join(repoRoot, "deploy", "scheduler", "config.yaml")
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", src, err)
	}
	return cfg, nil
}

// TopologyPlacementArgs returns the TopologyPlacement args of every profile
// of a scheduler configuration as DeployedSchedulerConfig decodes it; they
// are cfg's own maps, so changing them changes cfg.
func TopologyPlacementArgs(cfg map[string]any) []map[string]any {
	var out []map[string]any
	profiles, _ := cfg["profiles"].([]any)
	for _, profile := range profiles {
		pluginConfigs, _ := asMap(profile)["pluginConfig"].([]any)
		for _, pc := range pluginConfigs {
			if asMap(pc)["name"] == lockstep.TopologyPlacementPlugin {
				out = append(out, asMap(asMap(pc)["args"]))
			}
		}
	}
	return out
}

// DeployedPreferredWait is deploy/'s TopologyPlacement preferredWait.
func DeployedPreferredWait(repoRoot string) (time.Duration, error) {
	cfg, err := DeployedSchedulerConfig(repoRoot)
	if err != nil {
		return 0, err
	}
	all := TopologyPlacementArgs(cfg)
	if len(all) == 0 {
		return 0, fmt.Errorf("deploy/scheduler/config.yaml: no profile configures TopologyPlacement args")
	}
	raw, _ := all[0]["preferredWait"].(string)
	wait, err := time.ParseDuration(raw)
	if err != nil {
		return 0, fmt.Errorf("deploy/scheduler/config.yaml: TopologyPlacement args.preferredWait %q: want a duration", raw)
	}
	return wait, nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// KubeSchedulerComponent describes a kube-scheduler build in bin/ (ours, or
// the stock one the benchmark compares against) run with the
// KubeSchedulerConfiguration cfg, pointed at this cluster as the scheduler's
// ServiceAccount and serving health on loopback.
func (c *Cluster) KubeSchedulerComponent(name, binary string, cfg map[string]any) (Component, error) {
	return c.KubeSchedulerComponentWith(name, binary, cfg, SchedulerOptions{})
}

// SchedulerOptions say how KubeSchedulerComponentWith runs a kube-scheduler
// beyond its configuration: the e2e suite's replicas and fault-injection
// runs set them.
type SchedulerOptions struct {
	// LeaderElection, when set, turns leader election on, on cfg's Lease,
	// with these durations: any number of replicas, each under its own
	// name, may then run at once and only the holder of the Lease
	// schedules. Unset, it is off (see renderSchedulerConfig).
	LeaderElection *LeaderElection
	// APIKubeconfig, when set, is the kubeconfig the scheduler reaches the
	// apiserver with instead of its ServiceAccount's own: one whose server
	// is a fault-injecting proxy. Its health and metrics endpoints still
	// authenticate callers directly, with the ServiceAccount's kubeconfig.
	APIKubeconfig string
	// ClientRate, when set, replaces SchedulerClientRate: a test of what
	// the scheduler does when its client, not planning, sets the pace.
	ClientRate *ClientRate
}

// KubeSchedulerComponentWith is KubeSchedulerComponent run as opts say.
func (c *Cluster) KubeSchedulerComponentWith(name, binary string, cfg map[string]any, opts SchedulerOptions) (Component, error) {
	kubeconfig, err := c.IdentityKubeconfig(SchedulerIdentity())
	if err != nil {
		return Component{}, err
	}
	api := kubeconfig
	if opts.APIKubeconfig != "" {
		api = opts.APIKubeconfig
	}
	if c.Model != nil {
		cfg = WithTopology(cfg, c.Model.TopologyConfig())
	}
	rate := SchedulerClientRate
	if opts.ClientRate != nil {
		rate = *opts.ClientRate
	}
	cfgPath, err := c.renderSchedulerConfig(name, api, cfg, opts.LeaderElection, rate)
	if err != nil {
		return Component{}, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return Component{}, err
	}
	port := strconv.Itoa(ports[0])
	return Component{
		Name:   name,
		Binary: binary,
		Args: []string{
			"--config=" + cfgPath,
			"--bind-address=127.0.0.1",
			"--secure-port=" + port,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--v=2",
		},
		HealthURL: "https://127.0.0.1:" + port + "/healthz",
	}, nil
}

// WithTopology returns a copy of the KubeSchedulerConfiguration cfg whose
// TopologyPlacement args describe topo, so the scheduler plans and rates on
// the same levels and oversubscription as the controller, the agent and the
// benchmark. Other args are kept; configurations without the plugin are
// returned as they are.
func WithTopology(cfg map[string]any, topo lockstep.TopologyConfig) map[string]any {
	data, err := json.Marshal(cfg)
	if err != nil {
		return cfg
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return cfg
	}
	profiles, _ := out["profiles"].([]any)
	for _, profile := range profiles {
		p, _ := profile.(map[string]any)
		pluginConfigs, _ := p["pluginConfig"].([]any)
		for _, pc := range pluginConfigs {
			entry, _ := pc.(map[string]any)
			if entry["name"] != lockstep.TopologyPlacementPlugin {
				continue
			}
			args, _ := entry["args"].(map[string]any)
			if args == nil {
				args = map[string]any{}
			}
			levels := make([]any, len(topo.Levels))
			for i, l := range topo.Levels {
				levels[i] = map[string]any{"name": l.Name, "nodeLabel": l.LabelKey, "nvlink": l.NVLink}
			}
			args["levels"] = levels
			delete(args, "oversubscription")
			if len(topo.Oversubscription) > 0 {
				over := map[string]any{}
				for k, v := range topo.Oversubscription {
					over[k] = v
				}
				args["oversubscription"] = over
			}
			entry["args"] = args
		}
	}
	return out
}

// TopologyConfigFile writes the cluster's topology configuration (the
// model's levels and oversubscription; the defaults without a model) as a
// TopologyConfig file for the components that take --topology-config, and
// returns its path.
func (c *Cluster) TopologyConfigFile() (string, error) {
	topo := lockstep.DefaultTopologyConfig()
	if c.Model != nil {
		topo = c.Model.TopologyConfig()
	}
	out, err := yaml.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		lockstep.TopologyConfig
	}{topologyconfig.APIVersion, topologyconfig.Kind, topo})
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "topology.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

// FakeAgentComponent describes the topology agent in fake mode, serving
// every node that carries a hardware profile label. One process stands in
// for a DaemonSet, so it gets the workers and request rate of many: at the
// defaults (4 workers, 100 QPS) it published the 5,000-node model at about
// 13 nodes a second.
func (c *Cluster) FakeAgentComponent() (Component, error) {
	return c.FakeAgentComponentWith(lockstep.FakeAllocationScheduler)
}

// FakeAgentComponentWith is FakeAgentComponent with the emulated device
// plugin's allocation mode: lockstep.FakeAllocationDevicePlugin makes it
// ignore lockstep.dev/gpus and pick its own free GPUs, as the stock NVIDIA
// device plugin does, so tests meet the node's real allocation differing
// from the scheduler's choice.
func (c *Cluster) FakeAgentComponentWith(allocation string) (Component, error) {
	topo, err := c.TopologyConfigFile()
	if err != nil {
		return Component{}, err
	}
	// Its /readyz waits for every node's first publication, minutes on the
	// 5,000-node model; callers wait for topology themselves.
	return c.managerComponent("topology-agent", "lockstep-topology-agent", FakeAgentIdentity(), "/healthz",
		"--mode=fake", "--node-selector="+lockstep.LabelProfile, "--topology-config="+topo,
		"--workers=16", "--kube-api-qps=300", "--kube-api-burst=600", "--fake-allocation="+allocation)
}

// ControllerComponent describes the TrainingJob controller, without leader
// election so that a restarted one need not wait out its predecessor's
// lease.
func (c *Cluster) ControllerComponent() (Component, error) {
	return c.ControllerComponentFor(SchedulerName)
}

// ControllerComponentFor describes the TrainingJob controller giving its
// pods schedulerName, so the benchmark can hand the same jobs to other
// schedulers.
func (c *Cluster) ControllerComponentFor(schedulerName string) (Component, error) {
	return c.ControllerComponentWith("controller", ControllerOptions{SchedulerName: schedulerName})
}

// ControllerOptions say how ControllerComponentWith runs the TrainingJob
// controller.
type ControllerOptions struct {
	// SchedulerName is the scheduler the controller gives its pods; empty
	// means Lockstep's (SchedulerName).
	SchedulerName string
	// LeaderElection, when set, turns leader election on, on deploy/'s
	// Lease (ControllerLeaseNamespace/ControllerLeaseName), with these
	// durations: the e2e suite's replicas. Unset, it is off.
	LeaderElection *LeaderElection
}

// ControllerComponentWith describes the TrainingJob controller as opts say,
// under name.
func (c *Cluster) ControllerComponentWith(name string, opts ControllerOptions) (Component, error) {
	topo, err := c.TopologyConfigFile()
	if err != nil {
		return Component{}, err
	}
	schedulerName := opts.SchedulerName
	if schedulerName == "" {
		schedulerName = SchedulerName
	}
	args := []string{"--leader-elect=false"}
	if le := opts.LeaderElection; le != nil {
		args = []string{
			"--leader-elect=true",
			"--leader-election-namespace=" + ControllerLeaseNamespace,
			"--leader-elect-lease-duration=" + le.LeaseDuration.String(),
			"--leader-elect-renew-deadline=" + le.RenewDeadline.String(),
			"--leader-elect-retry-period=" + le.RetryPeriod.String(),
		}
	}
	args = append(args, "--scheduler-name="+schedulerName, "--topology-config="+topo)
	return c.managerComponent(name, "lockstep-controller", ControllerIdentity(), controllerProbe, args...)
}

// controllerProbe is the TrainingJob controller's endpoint that says it has
// started: /readyz, its caches synced (on a standby replica too). /healthz
// answers as soon as the probe server runs, before the caches sync; the
// manager acts on a failed runnable (a metrics listener that could not
// bind) only after they have, so a controller about to exit passes that
// check more easily.
const controllerProbe = "/readyz"

// managerComponent describes one of our controller-runtime binaries: a
// kubeconfig of its ServiceAccount on this cluster, metrics and health
// probes on loopback ports, started once probe (/healthz or /readyz)
// answers, and its own args.
func (c *Cluster) managerComponent(name, binary string, id Identity, probe string, args ...string) (Component, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return Component{}, err
	}
	kubeconfig, err := c.IdentityKubeconfig(id)
	if err != nil {
		return Component{}, err
	}
	return Component{
		Name:   name,
		Binary: binary,
		Args: append([]string{
			"--kubeconfig=" + kubeconfig,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
			"--v=2",
		}, args...),
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d%s", ports[1], probe),
	}, nil
}

// StartComponents starts every component the suite runs: on a local
// control plane its default scheduler (an existing cluster has its own),
// then the scheduler, the fake topology agent and the TrainingJob
// controller, and returns once the agent has published every model node's
// NodeTopology and the node-critical DaemonSet runs on every node. Before
// that the scheduler plans a node's GPUs without its topology and leaves
// the choice of GPUs to the device plugin, as it should for a node that
// just joined; the tests, the demo and cluster-up describe a cluster past
// that moment.
func (c *Cluster) StartComponents(ctx context.Context) error {
	describes := []func() (Component, error){c.SchedulerComponent, c.FakeAgentComponent, c.ControllerComponent}
	if c.Local() {
		describes = append([]func() (Component, error){c.DefaultSchedulerComponent}, describes...)
	}
	if err := c.startSuite(ctx, describes...); err != nil {
		return err
	}
	if err := c.WaitTopologyPublished(ctx, 2*time.Minute); err != nil {
		return err
	}
	return c.WaitNodeCritical(ctx, 2*time.Minute)
}

// startSuite starts the components describes says, in order, and records
// them for ReviveComponents.
func (c *Cluster) startSuite(ctx context.Context, describes ...func() (Component, error)) error {
	for _, describe := range describes {
		comp, err := describe()
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.suite == nil {
			c.suite = map[string]func() (Component, error){}
		}
		c.suite[comp.Name] = describe
		c.mu.Unlock()
		if _, err := c.StartComponent(ctx, comp); err != nil {
			return err
		}
	}
	return nil
}

// ReviveComponents looks for components StartComponents started that have
// exited though nothing stopped them, starts each again (as its describe
// function now says, so with fresh ports), and returns an error naming each
// with its exit status and the end of its log. Without it a component that
// dies shows up only as every later test timing out, with its log left in
// an artifact directory CI does not print. Components killed or stopped on
// purpose (KillComponent, StopComponent) are no longer running and are left
// to whoever stopped them.
func (c *Cluster) ReviveComponents(ctx context.Context) error {
	// The control plane first: ours cannot start without it.
	errs := []error{c.reviveControlPlane(ctx)}
	type dead struct {
		p        *Process
		describe func() (Component, error)
	}
	var found []dead
	c.mu.Lock()
	for name, describe := range c.suite {
		p, ok := c.components[name]
		if !ok {
			continue
		}
		if exited, _ := p.Exited(); exited {
			delete(c.components, name)
			found = append(found, dead{p, describe})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(found, func(a, b dead) int { return strings.Compare(a.p.Name, b.p.Name) })
	for _, d := range found {
		_, exitErr := d.p.Exited()
		report := fmt.Sprintf("component %s exited unexpectedly (%v), %s after it started; the end of %s:\n%s",
			d.p.Name, exitErr, d.p.Ran().Round(time.Millisecond), d.p.LogPath, logTail(d.p.LogPath, componentLogTailLines))
		comp, err := d.describe()
		if err == nil {
			_, err = c.StartComponent(ctx, comp)
		}
		if err != nil {
			report += fmt.Sprintf("\nstarting it again: %v", err)
		} else {
			report += "\nstarted it again"
		}
		errs = append(errs, errors.New(report))
	}
	return errors.Join(errs...)
}

// reviveControlPlane starts the local control plane's components that
// exited again, and returns an error naming each with the end of its log.
// A component that exits is restarted in a real cluster (a kubelet runs
// the control plane as static pods); here, without this, every later test
// of the suite would fail (no namespace's ServiceAccount without
// kube-controller-manager, no garbage collection, no claims).
func (c *Cluster) reviveControlPlane(ctx context.Context) error {
	if c.local == nil {
		return nil
	}
	exited, err := c.local.exited()
	if err != nil {
		return fmt.Errorf("reading the control plane's pid files: %w", err)
	}
	if len(exited) == 0 {
		return nil
	}
	var errs []error
	for _, name := range exited {
		errs = append(errs, errors.New(c.local.exitReport(name)))
	}
	if _, err := c.restartExited(ctx); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, fmt.Errorf("started %s again", strings.Join(exited, ", ")))
	}
	return errors.Join(errs...)
}

// restartExited starts the local control plane's components that exited
// again, as a kubelet restarts a static pod, waits for the apiserver, and
// returns their names.
func (c *Cluster) restartExited(ctx context.Context) ([]string, error) {
	if c.local == nil {
		return nil, nil
	}
	exited, err := c.local.exited()
	if err != nil || len(exited) == 0 {
		return nil, err
	}
	if err := c.local.restart(ctx, exited); err != nil {
		return exited, fmt.Errorf("starting %s again: %w", strings.Join(exited, ", "), err)
	}
	if err := c.waitReady(ctx); err != nil {
		return exited, fmt.Errorf("waiting for the apiserver after starting %s again: %w", strings.Join(exited, ", "), err)
	}
	return exited, nil
}

// componentLogTailLines is how much of a dead component's log
// ReviveComponents quotes: its last error and what led to it.
const componentLogTailLines = 30

// logTail returns the last n lines of the file at path, reading at most its
// last 64 KiB (component logs at --v=2 run to megabytes).
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	defer f.Close()
	const window = 64 << 10
	if info, err := f.Stat(); err == nil && info.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			return fmt.Sprintf("(log unreadable: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// renderSchedulerConfig writes the scheduler configuration cfg with
// kubeconfig (the scheduler's ServiceAccount) and the client rate. With
// --config, kube-scheduler ignores --kubeconfig, so the file itself must
// name it. Without le, leader election is off: one scheduler runs here,
// and a restarted one must not wait out its predecessor's lease. With le,
// it is on, on cfg's Lease (deploy/'s kube-system/lockstep-scheduler),
// with le's durations.
func (c *Cluster) renderSchedulerConfig(name, kubeconfig string, cfg map[string]any, le *LeaderElection, rate ClientRate) (string, error) {
	out, err := RenderSchedulerConfigAtRate(cfg, kubeconfig, le, rate)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, name+"-config.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

// LeaderElection configures the Lease of replicated components: how long a
// lease lasts without renewal, how long the leader keeps retrying a renewal
// before it gives up leading, and how often replicas try.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// The Leases replicas elect their leader through: deploy/'s, so the
// ServiceAccounts' RBAC allows them.
const (
	SchedulerLeaseNamespace  = "kube-system"
	SchedulerLeaseName       = "lockstep-scheduler"
	ControllerLeaseNamespace = "lockstep-system"
	ControllerLeaseName      = "lockstep-controller.lockstep.dev"
)

// ClientRate is a scheduler's client-side limit on API requests.
type ClientRate struct{ QPS, Burst int }

// SchedulerClientRate is the rate every scheduler of a local cluster talks
// to the apiserver at: binding is one write per pod, so unequal limits
// would measure the limits, not the schedulers.
var SchedulerClientRate = ClientRate{QPS: 200, Burst: 400}

// RenderSchedulerConfig returns the KubeSchedulerConfiguration cfg as YAML
// with kubeconfig and the local clusters' client rate
// (SchedulerClientRate), and leader election as renderSchedulerConfig
// describes.
func RenderSchedulerConfig(cfg map[string]any, kubeconfig string, le *LeaderElection) ([]byte, error) {
	return RenderSchedulerConfigAtRate(cfg, kubeconfig, le, SchedulerClientRate)
}

// RenderSchedulerConfigAtRate is RenderSchedulerConfig with the client rate
// given.
func RenderSchedulerConfigAtRate(cfg map[string]any, kubeconfig string, le *LeaderElection, rate ClientRate) ([]byte, error) {
	rendered := maps.Clone(cfg)
	rendered["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": rate.QPS, "burst": rate.Burst}
	if le == nil {
		rendered["leaderElection"] = map[string]any{"leaderElect": false}
	} else {
		election, _ := rendered["leaderElection"].(map[string]any)
		election = maps.Clone(election)
		if election == nil {
			election = map[string]any{}
		}
		election["leaderElect"] = true
		election["leaseDuration"] = le.LeaseDuration.String()
		election["renewDeadline"] = le.RenewDeadline.String()
		election["retryPeriod"] = le.RetryPeriod.String()
		rendered["leaderElection"] = election
	}
	return yaml.Marshal(rendered)
}

// waitHealthy polls url until it answers 200, failing early if p exits.
func waitHealthy(ctx context.Context, p *Process, url string) error {
	// Components serve health over HTTPS with self-signed certificates.
	httpClient := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe
	}
	return Poll(ctx, 200*time.Millisecond, time.Minute, url, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("process exited: %v", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
