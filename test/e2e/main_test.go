// Package e2e holds Lockstep's end-to-end tests. TestMain brings up one
// cluster for the test process (see test/e2e/framework and pkg/localcluster);
// each test works in its own namespace and leaves the cluster's GPUs free
// when it ends.
//
// Most tests have their process's cluster to themselves while they run:
// they assert on the whole cluster's GPUs (a gang filling four leaves, a
// gang that fits nowhere, a drained leaf, the scheduler's metrics) or stop
// a shared component. The tests that call t.Parallel do neither (they use
// their namespace and a few GPUs, and assert nothing about the rest of the
// cluster), so they share it, running side by side after the others. To
// use the machine while clusters wait, make e2e runs the suite in several
// processes at once, each with a cluster of its own (hack/e2eshard).
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// cluster is the package's test cluster, set by TestMain before any test.
var cluster *framework.Cluster

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	// Listing the tests (go test -list, as hack/e2eshard does to deal them
	// to shards) needs no cluster.
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	model := os.Getenv("E2E_MODEL")
	if model == "" {
		model = filepath.Join(root, "test", "e2e", "models", "hgx-32.yaml")
	}

	// teardown runs once: after the tests, or from the signal handler when the
	// run is interrupted, so Ctrl-C never leaves a cluster behind.
	var (
		mu       sync.Mutex
		started  *framework.Cluster
		tornDown bool
	)
	teardown := func(failed bool) {
		mu.Lock()
		defer mu.Unlock()
		if tornDown || started == nil {
			tornDown = true
			return
		}
		tornDown = true
		if failed {
			saveArtifacts(root, started)
		}
		if err := started.Stop(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: teardown: %v\n", err)
		}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "e2e: %v: tearing the cluster down\n", sig)
		cancel()
		teardown(true)
		os.Exit(130)
	}()

	begin := time.Now()
	c, err := framework.Start(ctx, localcluster.Options{
		RepoRoot:   root,
		Model:      model,
		Kubeconfig: os.Getenv("KUBECONFIG"),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the cluster: %v\n", err)
		return 1
	}
	mu.Lock()
	started, cluster = c, c
	mu.Unlock()
	code := func() int {
		if err := c.WaitNodesReady(ctx, 2*time.Minute); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		if err := c.StartComponents(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: cluster of %d nodes up in %s (dir %s)\n",
			c.Model.NodeCount(), time.Since(begin).Round(time.Millisecond), c.Dir)
		return m.Run()
	}()
	teardown(code != 0)
	return code
}

// saveArtifacts keeps the cluster's logs of a failed run under $ARTIFACTS,
// or _artifacts/ in the repository.
func saveArtifacts(root string, c *framework.Cluster) {
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(root, "_artifacts")
	}
	name := "e2e-" + time.Now().Format("20060102-150405")
	if shard := os.Getenv("E2E_SHARD"); shard != "" {
		// Shards run side by side (hack/e2eshard) and may fail in the
		// same second.
		name += "-shard" + shard
	}
	dir = filepath.Join(dir, name)
	if err := c.SaveArtifacts(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: saving logs: %v\n", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: logs of the failed run are in %s\n", dir)
}
