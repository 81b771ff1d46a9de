// Command localcluster starts and stops a long-lived local cluster for
// people (make cluster-up / cluster-down): the e2e harness's cluster, with its
// processes detached so they outlive this command.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|down --dir DIR [--model FILE] [--bin DIR] [--node-monitor-grace-period D]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "directory holding the cluster's files and logs")
	model := fs.String("model", "test/e2e/models/hgx-32.yaml", "cluster model file")
	bin := fs.String("bin", "bin", "directory with our binaries and the tools")
	grace := fs.Duration("node-monitor-grace-period", 0,
		"kube-controller-manager's node-monitor-grace-period, with KWOK's slower heartbeats; 0 keeps upstream's timings (50s). 5m for the 5,000-node model on a small machine")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, *dir, *model, *bin, *grace)
	case "down":
		err = down(ctx, *dir, *bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// repoRoot is the parent of the bin directory: deploy/ and the binaries are
// found from it.
func repoRoot(bin string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	return filepath.Dir(abs), nil
}

func up(ctx context.Context, dir, model, bin string, grace time.Duration) error {
	root, err := repoRoot(bin)
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	begin := time.Now()
	fmt.Printf("Starting a local cluster from %s in %s ...\n", model, dir)
	c, err := localcluster.Start(ctx, localcluster.Options{RepoRoot: root, Model: model, Dir: dir, Detached: true,
		NodeMonitorGracePeriod: grace})
	if err != nil {
		return err
	}
	// From here on a failure leaves a half-started cluster: take it down.
	fail := func(err error) error {
		if stopErr := localcluster.StopDetached(context.WithoutCancel(ctx), root, dir); stopErr != nil {
			return fmt.Errorf("%w (and stopping: %v)", err, stopErr)
		}
		return err
	}
	fmt.Printf("Control plane up; waiting for %d nodes ...\n", c.Model.NodeCount())
	if err := c.WaitNodesReady(ctx, 5*time.Minute); err != nil {
		return fail(err)
	}
	if err := c.StartComponents(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf(`
Local cluster %q is up in %s: %d nodes; lockstep-scheduler and the fake topology agent running.
Logs: %s

  export KUBECONFIG=%s
  %s get nodes -L %s

Stop it with: make cluster-down
`, c.Model.Name, time.Since(begin).Round(time.Second), c.Model.NodeCount(), c.LogDir,
		c.Kubeconfig, filepath.Join(bin, "kubectl"), c.Model.Levels[0].NodeLabel)
	return nil
}

func down(ctx context.Context, dir, bin string) error {
	root, err := repoRoot(bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		fmt.Printf("No local cluster in %s.\n", dir)
		return nil
	}
	if err := localcluster.StopDetached(ctx, root, dir); err != nil {
		return err
	}
	fmt.Printf("Local cluster in %s stopped and removed.\n", dir)
	return nil
}
