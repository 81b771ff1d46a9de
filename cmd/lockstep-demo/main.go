// Command lockstep-demo is `make demo`: it starts a detached local cluster
// of fake GPU nodes with Lockstep's scheduler, controller and fake topology
// agent, submits example TrainingJobs (ours from deploy/examples and users'
// Kubeflow manifests converted in-process), waits until every job is placed
// and running, and prints and draws where each rank landed. `down` removes
// the cluster again (make demo-down).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

type options struct {
	dir, model, bin, examples, kubeflow string
	timeout                             time.Duration
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: lockstep-demo up|down --dir DIR [--model FILE] [--bin DIR] [--examples DIR] [--kubeflow DIR]")
		os.Exit(2)
	}
	var o options
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&o.dir, "dir", ".demo", "directory holding the demo cluster's files and logs")
	fs.StringVar(&o.model, "model", "test/e2e/models/hgx-32.yaml", "cluster model file")
	fs.StringVar(&o.bin, "bin", "bin", "directory with our binaries and the tools")
	fs.StringVar(&o.examples, "examples", "deploy/examples", "directory of TrainingJob manifests to submit")
	fs.StringVar(&o.kubeflow, "kubeflow", "deploy/examples/kubeflow", "directory of Kubeflow manifests to convert and submit (skipped when missing)")
	fs.DurationVar(&o.timeout, "timeout", 4*time.Minute, "how long to wait for every job to be placed")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	if os.Args[1] == "up" {
		err = up(ctx, o)
	} else {
		err = down(ctx, o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockstep-demo %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// kubeconfigOf is where the framework's local cluster in dir keeps its
// kubeconfig.
func kubeconfigOf(dir string) string {
	return filepath.Join(dir, "kwok", "clusters", "lockstep", "kubeconfig.yaml")
}

func up(ctx context.Context, o options) error {
	begin := time.Now()
	since := func() time.Duration { return time.Since(begin).Round(time.Second) }
	root, err := filepath.Abs(filepath.Join(o.bin, ".."))
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("a demo cluster already runs in %s\n  use it:    export KUBECONFIG=%s\n  remove it: make demo-down", dir, kubeconfigOf(dir))
	}

	// Read every job before any cluster work, so a bad manifest fails fast.
	jobs, err := loadOwnExamples(o.examples)
	if err != nil {
		return err
	}
	own := len(jobs)
	var warnings []string
	if _, err := os.Stat(o.kubeflow); err == nil {
		converted, w, err := convertKubeflow(o.kubeflow)
		if err != nil {
			return err
		}
		jobs, warnings = append(jobs, converted...), w
	} else {
		fmt.Printf("No Kubeflow examples in %s; submitting ours only.\n", o.kubeflow)
	}
	if err := intoNamespace(demoNamespace, jobs); err != nil {
		return err
	}

	fmt.Printf("Starting a local cluster from %s in %s ...\n", o.model, dir)
	c, err := localcluster.Start(ctx, localcluster.Options{RepoRoot: root, Model: o.model, Dir: dir, Detached: true})
	if err != nil {
		// Start tore down what it started; the directory goes too, so that
		// the next make demo does not find a "running" cluster.
		if stopErr := localcluster.StopDetached(context.WithoutCancel(ctx), root, dir); stopErr != nil {
			return fmt.Errorf("%w (and removing %s: %v)", err, dir, stopErr)
		}
		return err
	}
	fail := func(err error) error {
		fmt.Fprintf(os.Stderr, "Logs: %s\n", c.LogDir)
		if stopErr := localcluster.StopDetached(context.WithoutCancel(ctx), root, dir); stopErr != nil {
			return fmt.Errorf("%w (and stopping: %v)", err, stopErr)
		}
		return err
	}
	if err := c.WaitNodesReady(ctx, 5*time.Minute); err != nil {
		return fail(err)
	}
	if err := c.StartComponents(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf("cluster up (%s): %d nodes with GPU topology published; scheduler, controller and fake topology agent running\n", since(), c.Model.NodeCount())

	if err := ensureNamespace(ctx, c.Client, demoNamespace); err != nil {
		return fail(err)
	}
	for _, j := range jobs {
		if err := c.Client.Create(ctx, j); err != nil {
			return fail(fmt.Errorf("creating TrainingJob %s: %w", j.Name, err))
		}
	}
	fmt.Printf("submitted %d jobs (%d from %s, %d converted from Kubeflow) to namespace %s (%s)\n",
		len(jobs), own, o.examples, len(jobs)-own, demoNamespace, since())
	for _, w := range warnings {
		fmt.Printf("  convert warning: %s\n", w)
	}

	// From here on the cluster stays up whatever happens: it is there to be
	// looked at.
	// Every job ends up placed, or held on purpose with its reason (a
	// manifest queued for a Kueue that the demo does not run); only a job
	// that is neither when the time is up is a failure.
	var placedJobs []Job
	last := [2]int{-1, -1}
	deadline := time.Now().Add(o.timeout)
	for {
		var placed, held int
		placedJobs, placed, held, err = observe(ctx, c.Client, jobs)
		if err != nil {
			return err
		}
		if now := [2]int{placed, held}; now != last {
			fmt.Printf("%d/%d jobs placed, %d held (%s)\n", placed, len(jobs), held, since())
			last = now
		}
		if placed+held == len(jobs) {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("only %d of %d jobs placed and running (%d held on purpose) after %s; see %s get tj,pods -n %s and the logs in %s",
				placed, len(jobs), held, o.timeout, filepath.Join(o.bin, "kubectl"), demoNamespace, c.LogDir)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}

	fmt.Println()
	if tableErr := WriteTable(os.Stdout, placedJobs); tableErr != nil {
		return tableErr
	}
	nodes := &corev1.NodeList{}
	if listErr := c.Client.List(ctx, nodes); listErr != nil {
		return listErr
	}
	tree := buildTree(fmt.Sprintf("Lockstep demo: %d jobs on cluster model %s", len(jobs), c.Model.Name), c.Model, nodes.Items)
	var svg bytes.Buffer
	if svgErr := WriteSVG(&svg, tree, placedJobs); svgErr != nil {
		return svgErr
	}
	svgPath := filepath.Join(dir, "placement.svg")
	if writeErr := os.WriteFile(svgPath, svg.Bytes(), 0o644); writeErr != nil {
		return writeErr
	}
	fmt.Printf(`
Placement picture: %s
Done in %s. The cluster keeps running (logs: %s):

  export KUBECONFIG=%s
  %s get tj -A
  %s get pods -n %s -o wide

Remove it with: make demo-down
`, svgPath, since(), c.LogDir, c.Kubeconfig, filepath.Join(o.bin, "kubectl"), filepath.Join(o.bin, "kubectl"), demoNamespace)
	return err
}

func down(ctx context.Context, o options) error {
	root, err := filepath.Abs(filepath.Join(o.bin, ".."))
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("No demo cluster in %s.\n", dir)
		return nil
	}
	if err := localcluster.StopDetached(ctx, root, dir); err != nil {
		return err
	}
	fmt.Printf("Demo cluster in %s stopped and removed.\n", dir)
	return nil
}
