package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// kwokCluster is a local control plane run by kwokctl's binary runtime
// (docs/architecture.md, "Test cluster"): etcd, kube-apiserver,
// kube-controller-manager (for garbage collection) and the KWOK controller,
// all on loopback ports of our choosing, with no kube-scheduler: ours is the
// only one.
type kwokCluster struct {
	name    string
	workdir string // KWOK_WORKDIR
	binDir  string
	logDir  string
	// stagesPath holds the KWOK pod stages (deploy/kwok/stages.yaml).
	stagesPath string
	// nodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period; zero keeps upstream's default.
	nodeMonitorGracePeriod time.Duration
}

// newKWOKCluster describes the local control plane of the cluster in dir.
func newKWOKCluster(repoRoot, dir string) *kwokCluster {
	return &kwokCluster{
		name:       "lockstep",
		workdir:    filepath.Join(dir, "kwok"),
		binDir:     filepath.Join(repoRoot, "bin"),
		logDir:     filepath.Join(dir, "logs"),
		stagesPath: filepath.Join(repoRoot, "deploy", "kwok", "stages.yaml"),
	}
}

// kwokctlConfig renders the KwokctlConfiguration, followed by our pod stages,
// which kwokctl hands to the KWOK controller. Every component binds to
// 127.0.0.1; ports are picked by us rather than by kwokctl, whose own pick
// probes all interfaces and can collide between parallel clusters.
func (k *kwokCluster) kwokctlConfig() ([]byte, error) {
	ports, err := FreePorts(5)
	if err != nil {
		return nil, err
	}
	bin := func(name string) string { return filepath.Join(k.binDir, name) }
	// kubeAdmission runs kube-apiserver's default admission plugins, among
	// them DefaultTolerationSeconds, which gives pods their 300 s
	// tolerations of unreachable and not-ready nodes, as in a real cluster.
	cfg := map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
		"kind":       "KwokctlConfiguration",
		"options": map[string]any{
			"runtime":                     "binary",
			"kubeAdmission":               true,
			"kubeVersion":                 "v1.34.4",
			"securePort":                  true,
			"bindAddress":                 "127.0.0.1",
			"components":                  []string{"etcd", "kube-apiserver", "kube-controller-manager", "kwok-controller"},
			"etcdBinary":                  bin("etcd"),
			"kubeApiserverBinary":         bin("kube-apiserver"),
			"kubeControllerManagerBinary": bin("kube-controller-manager"),
			"kwokControllerBinary":        bin("kwok"),
			"kubectlBinary":               bin("kubectl"),
			"cacheDir":                    filepath.Join(k.workdir, "cache"),
			"quietPull":                   true,
			"etcdPort":                    ports[0],
			"etcdPeerPort":                ports[1],
			"kubeApiserverPort":           ports[2],
			"kwokControllerPort":          ports[3],
			"kubeControllerManagerPort":   ports[4],
		},
		"componentsPatches": []map[string]any{
			{
				// KWOK manages only nodes the cluster model marked as fake, so on a
				// shared cluster it never touches real nodes.
				"name": "kwok-controller",
				"extraArgs": []map[string]any{
					{"key": "manage-all-nodes", "value": "false", "override": true},
					{"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
				},
			},
			{
				// Test data is thrown away; fsync only slows a 2-core machine down.
				"name":      "etcd",
				"extraArgs": []map[string]any{{"key": "unsafe-no-fsync", "value": "true"}},
			},
			{
				// The node lifecycle runs with upstream's defaults (node-monitor-
				// period 5s, node-monitor-grace-period 50s in Kubernetes 1.34), so
				// a node that goes dark (the e2e suite's DarkenNode) is noticed as in a real
				// cluster; Options.NodeMonitorGracePeriod lengthens the grace
				// only for the large benchmark models. New nodes are tainted
				// not-ready until the node lifecycle controller clears them; at
				// the default 20 requests/s that takes minutes for the
				// 5,000-node model.
				"name":      "kube-controller-manager",
				"extraArgs": k.controllerManagerArgs(),
			},
			{
				// The apiserver advertises its address in the kubernetes Service;
				// keep it on loopback so nothing depends on the host's interfaces.
				"name":      "kube-apiserver",
				"extraArgs": []map[string]any{{"key": "advertise-address", "value": "127.0.0.1"}},
			},
		},
	}
	for k2, v := range k.heartbeatOptions() {
		cfg["options"].(map[string]any)[k2] = v
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// KWOK plays node and pod stages four at a time by default, which takes
	// minutes to bring the 5,000-node model up; writes stay well below the
	// apiserver's in-flight limit at 16.
	kwokCfg, err := yaml.Marshal(map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
		"kind":       "KwokConfiguration",
		"options": map[string]any{
			"nodePlayStageParallelism": 16,
			"nodeLeaseParallelism":     16,
			"podPlayStageParallelism":  16,
		},
	})
	if err != nil {
		return nil, err
	}
	out = append(append(out, "---\n"...), kwokCfg...)
	stages, err := os.ReadFile(k.stagesPath)
	if err != nil {
		return nil, fmt.Errorf("reading KWOK stages: %w", err)
	}
	return append(append(out, "---\n"...), stages...), nil
}

// ScaleNodeMonitorGracePeriod is the node-monitor-grace-period for the
// large benchmark models: KWOK renews 5,000 node leases on a loaded 2-core
// machine only late, and upstream's 50 s would turn healthy nodes Unknown
// while it catches up. Nothing there darkens nodes.
const ScaleNodeMonitorGracePeriod = 5 * time.Minute

// controllerManagerArgs are kube-controller-manager's extra flags.
//
// Leader election is off: the cluster runs one kube-controller-manager,
// which no standby could take over from, and with it on, the lease
// renewals a loaded 2-core machine answers late (the e2e shards beside
// each other and the unit tests) made it exit ("leaderelection lost")
// mid-suite, leaving namespaces without ServiceAccounts, pods without
// garbage collection and claims without deallocation. Where it still
// exits, reviveControlPlane restarts it before the next test.
func (k *kwokCluster) controllerManagerArgs() []map[string]any {
	args := []map[string]any{
		{"key": "kube-api-qps", "value": "200"},
		{"key": "kube-api-burst", "value": "400"},
		{"key": "leader-elect", "value": "false"},
	}
	if k.nodeMonitorGracePeriod > 0 {
		// After kwokctl's own flag, so it wins; kwokctl would multiply an
		// option by its heartbeatFactor.
		args = append(args, map[string]any{"key": "node-monitor-grace-period", "value": k.nodeMonitorGracePeriod.String()})
	}
	return args
}

// heartbeatOptions are the kwokctl options that time node heartbeats and
// the node lifecycle. kwokctl's own defaults are not upstream's: its
// heartbeatFactor 5 stretches the node Lease to 200 s (renewed every
// 50 s), node-monitor-period to 25 s and node-monitor-grace-period to
// 3m20s. By default the cluster runs a kubelet's and kube-controller-
// manager's defaults instead: a 40 s Lease renewed every 10 s,
// node-monitor-period 5 s and node-monitor-grace-period 50 s (Kubernetes
// 1.34). With nodeMonitorGracePeriod set (the large benchmark models),
// kwokctl's slower heartbeats stay, as 5,000 Lease renewals every 10 s
// would swamp a 2-core machine, and the grace is the one given (a flag of
// controllerManagerArgs).
func (k *kwokCluster) heartbeatOptions() map[string]any {
	if k.nodeMonitorGracePeriod > 0 {
		return nil
	}
	return map[string]any{
		"heartbeatFactor":                                         1,
		"nodeLeaseDurationSeconds":                                40,
		"kubeControllerManagerNodeMonitorPeriodMilliseconds":      (5 * time.Second).Milliseconds(),
		"kubeControllerManagerNodeMonitorGracePeriodMilliseconds": (50 * time.Second).Milliseconds(),
	}
}

// kwokctl runs kwokctl with a clean environment: KWOK_* variables would
// override our configuration, and bin/ goes first on PATH because kwokctl
// looks kubectl up there.
func (k *kwokCluster) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(k.binDir, "kwokctl"), args...)
	env := []string{"KWOK_WORKDIR=" + k.workdir, "PATH=" + k.binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KWOK_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	logFile, err := os.OpenFile(filepath.Join(k.logDir, "kwokctl.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "+ kwokctl %s\n", strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w (log: %s)", args[0]+" "+args[1], err, logFile.Name())
	}
	return nil
}

func (k *kwokCluster) clusterDir() string { return filepath.Join(k.workdir, "clusters", k.name) }

func (k *kwokCluster) kubeconfig() string { return filepath.Join(k.clusterDir(), "kubeconfig.yaml") }

// create starts the control plane. kwokctl returns before the apiserver is
// necessarily ready; the caller waits for /readyz.
func (k *kwokCluster) create(ctx context.Context) error {
	cfg, err := k.kwokctlConfig()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(k.workdir, "kwokctl.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	// --kubeconfig= keeps kwokctl from adding a context to ~/.kube/config.
	return k.kwokctl(ctx, "create", "cluster", "--name", k.name, "--config", cfgPath,
		"--kubeconfig=", "--timeout", "5m")
}

// delete stops the control plane and removes its files. kwokctl's own delete
// is tried first; the pid files are the fallback, so a half-created cluster
// is still cleaned up.
func (k *kwokCluster) delete(ctx context.Context) error {
	// delete refuses an empty --kubeconfig; a path that does not exist means
	// "touch no kubeconfig".
	err := k.kwokctl(ctx, "delete", "cluster", "--name", k.name,
		"--kubeconfig", filepath.Join(k.workdir, "no-kubeconfig.yaml"))
	pidFiles, _ := filepath.Glob(filepath.Join(k.clusterDir(), "pids", "*.pid"))
	for _, f := range pidFiles {
		if kerr := KillPIDFile(f, 2*time.Second); kerr != nil && err == nil {
			err = kerr
		}
	}
	return err
}

// pids returns the process ids of the running control-plane components, by
// component name.
func (k *kwokCluster) pids() (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(k.clusterDir(), "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var pid int
		if _, err := fmt.Sscanf(string(data), "%d", &pid); err != nil {
			return nil, fmt.Errorf("pid file %s: %w", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return out, nil
}

// logFiles returns the control-plane component logs.
func (k *kwokCluster) logFiles() []string {
	files, _ := filepath.Glob(filepath.Join(k.clusterDir(), "logs", "*.log"))
	return files
}

// exited returns the control-plane components whose process is gone, or
// is a zombie no one reaped (kwokctl forks them and exits, so they are
// not this process's children), by name, sorted.
func (k *kwokCluster) exited() ([]string, error) {
	pids, err := k.pids()
	if err != nil {
		return nil, err
	}
	var out []string
	for name, pid := range pids {
		if !ProcessRunning(pid) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ProcessRunning reports whether process pid exists and is not a zombie.
func ProcessRunning(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// hold any character.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// restart starts the exited components names again, as a kubelet
// restarts a static pod whose container exited: kwokctl starts every
// component whose pid file names no running process, with the arguments
// it first started it with.
func (k *kwokCluster) restart(ctx context.Context, names []string) error {
	for _, name := range names {
		// A zombie's pid still answers signals: kwokctl would take it for
		// running.
		if err := os.Remove(filepath.Join(k.clusterDir(), "pids", name+".pid")); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return k.kwokctl(ctx, "start", "cluster", "--name", k.name, "--timeout", "2m")
}

// exitReport says that control-plane component name exited, with the end
// of its log.
func (k *kwokCluster) exitReport(name string) string {
	path := filepath.Join(k.clusterDir(), "logs", name+".log")
	return fmt.Sprintf("control-plane component %s exited unexpectedly; the end of %s:\n%s", name, path, logTail(path, componentLogTailLines))
}
