package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// kwokCluster is a local control plane run by kwokctl's binary runtime
// (DESIGN §6): etcd, kube-apiserver, kube-controller-manager (for garbage
// collection) and the KWOK controller, all on loopback ports of our choosing,
// with no kube-scheduler: ours is the only one.
type kwokCluster struct {
	name    string
	workdir string // KWOK_WORKDIR
	binDir  string
	logDir  string
	// stagesPath holds the KWOK pod stages (deploy/kwok/stages.yaml).
	stagesPath string
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
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	bin := func(name string) string { return filepath.Join(k.binDir, name) }
	cfg := map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
		"kind":       "KwokctlConfiguration",
		"options": map[string]any{
			"runtime":                     "binary",
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
				// KWOK renews 5,000 node leases on a loaded 2-core machine only
				// late; a longer grace keeps nodes Ready while it catches up.
				// Nothing here kills nodes and waits for them to turn NotReady.
				// New nodes are tainted not-ready until its node lifecycle
				// controller clears them; at the default 20 requests/s that
				// takes minutes for the 5,000-node model.
				"name": "kube-controller-manager",
				"extraArgs": []map[string]any{
					{"key": "node-monitor-grace-period", "value": "5m"},
					{"key": "kube-api-qps", "value": "200"},
					{"key": "kube-api-burst", "value": "400"},
				},
			},
			{
				// The apiserver advertises its address in the kubernetes Service;
				// keep it on loopback so nothing depends on the host's interfaces.
				"name":      "kube-apiserver",
				"extraArgs": []map[string]any{{"key": "advertise-address", "value": "127.0.0.1"}},
			},
		},
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
