// Command e2eshard runs the e2e suite (test/e2e) as several shards at once,
// each a test process with a local cluster of its own.
//
// Most of the suite's wall time is waiting: for a node lifecycle grace
// period, a restart backoff, a leader lease, a simulated runtime. A test
// cannot share its cluster with another that runs at the same time, because
// most of them assert on the whole cluster's GPUs (a gang that fills four
// leaves, a gang that cannot fit anywhere, a drained leaf, the scheduler's
// metrics) or stop a shared component (failover, API faults, a stale
// agent). So the tests of one shard run one after another on that shard's
// cluster, exactly as they do alone, and the shards run side by side: the
// machine's cores are busy while each cluster waits.
//
// Tests are dealt to shards by their last measured durations (shards.txt
// beside the tests), longest first onto the shard with the least work, so
// the shards end together. Tests whose names share a prefix declared as a
// group there (those that start the same peer operator) go to one shard, so
// the peer starts once.
//
// Usage:
//
//	go run ./hack/e2eshard [-shards N] [-timeout D] [-run REGEXP] [-count N] [-update]
//
// -update rewrites shards.txt with the durations this run measured. With
// $KUBECONFIG set (an existing cluster) there is one cluster, so one shard.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pkg is the suite's package, relative to the repository root.
const pkg = "./test/e2e"

// defaultSeconds is what a test missing from shards.txt is assumed to take:
// a new test costs about what a typical one does, until -update measures it.
const defaultSeconds = 10

func main() {
	var (
		shards  = flag.Int("shards", envInt("E2E_SHARDS", 4), "number of shards, each with its own cluster (default $E2E_SHARDS or 4)")
		timeout = flag.Duration("timeout", 45*time.Minute, "go test -timeout for each shard")
		run     = flag.String("run", ".", "run only the tests matching this regexp (go test -run)")
		table   = flag.String("durations", filepath.Join("test", "e2e", "shards.txt"), "measured durations and groups")
		update  = flag.Bool("update", false, "rewrite the durations file with this run's measurements")
		count   = flag.Int("count", 1, "run each test this many times (go test -count)")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "e2eshard: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := mainErr(*shards, *count, *timeout, *run, *table, *update); err != nil {
		fmt.Fprintf(os.Stderr, "e2eshard: %v\n", err)
		os.Exit(1)
	}
}

func mainErr(shards, count int, timeout time.Duration, run, tablePath string, update bool) error {
	if shards < 1 {
		return fmt.Errorf("-shards=%d: want at least 1", shards)
	}
	if count < 1 {
		return fmt.Errorf("-count=%d: want at least 1", count)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "lockstep-e2eshard-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	binary := filepath.Join(tmp, "e2e.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", binary, pkg)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the e2e suite: %w", err)
	}
	pkgDir, err := filepath.Abs(pkg)
	if err != nil {
		return err
	}

	tab, err := readTable(tablePath)
	if err != nil {
		return err
	}
	// A -run naming subtests cannot be split by top-level name: one shard
	// runs it as given.
	var plans []plan
	if strings.Contains(run, "/") || os.Getenv("KUBECONFIG") != "" {
		plans = []plan{{run: run}}
	} else {
		names, err := listTests(ctx, binary, pkgDir, run)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("no test matches -run %q", run)
		}
		plans = deal(names, tab, shards)
	}

	results := make([]result, len(plans))
	var (
		wg  sync.WaitGroup
		out sync.Mutex // one line at a time on stdout
	)
	begin := time.Now()
	for i, p := range plans {
		fmt.Printf("e2eshard: shard %d/%d: %d tests, about %s: %s\n", i+1, len(plans), len(p.tests), p.estimate.Round(time.Second), strings.Join(p.tests, " "))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runShard(ctx, binary, pkgDir, i, len(plans), p, count, timeout, &out)
		}()
	}
	wg.Wait()

	var failed []string
	measured := map[string]float64{}
	for i, r := range results {
		for name, secs := range r.durations {
			measured[name] = secs
		}
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("shard %d: %v", i+1, r.err))
		}
		for _, name := range r.failed {
			failed = append(failed, fmt.Sprintf("shard %d: %s failed", i+1, name))
		}
		// A test that never reported (the process died under it) is a
		// failure even when the exit status says otherwise.
		for _, name := range plans[i].tests {
			if _, ok := r.durations[name]; !ok {
				failed = append(failed, fmt.Sprintf("shard %d: %s did not report a result", i+1, name))
			}
		}
		fmt.Printf("e2eshard: shard %d/%d ended in %s\n", i+1, len(plans), r.wall.Round(time.Second))
	}
	printSlowest(measured, 10)
	fmt.Printf("e2eshard: %d tests in %d shards, %s wall\n", len(measured), len(plans), time.Since(begin).Round(time.Second))
	if update && len(failed) == 0 {
		if err := tab.write(tablePath, measured); err != nil {
			return err
		}
		fmt.Printf("e2eshard: wrote %s\n", tablePath)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if len(failed) > 0 {
		// The shards' output is long and interleaved, and CI may keep only
		// its tail: repeat each failure's own report here, or the shard's
		// last lines when no test reported one (a panic, a timeout).
		for i, r := range results {
			if r.err == nil && len(r.failed) == 0 {
				continue
			}
			lines := r.report()
			fmt.Printf("e2eshard: shard %d/%d failure report:\n", i+1, len(plans))
			for _, l := range lines {
				fmt.Printf("  %s\n", l)
			}
		}
		return fmt.Errorf("FAIL:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// plan is one shard's share of the suite.
type plan struct {
	tests    []string
	estimate time.Duration
	// run, when set, is passed as -test.run instead of tests.
	run string
}

// result is what one shard's process reported.
type result struct {
	durations map[string]float64 // top-level tests that passed or failed
	failed    []string           // top-level tests that failed, in order
	// reports are the lines go test printed under each failed test's
	// verdict (its subtests' verdicts), at most maxReportLines; tail is
	// the shard's last output.
	reports  []string
	inReport bool
	tail     ring
	// current is the test whose output go test -v streams now: the name
	// of its last "=== RUN", "CONT" or "NAME" line. logs are the last
	// logLines lines each test logged (t.Log, t.Error: indented under
	// that header), by name. go test -v prints a test's messages as they
	// come, not under its verdict, so this is where a failure's reason
	// is.
	current string
	logs    map[string]*ring
	wall    time.Duration
	err     error
}

// observe records one line of the shard's go test -v output.
func (res *result) observe(line string) {
	res.tail.add(line)
	if m := streamLine.FindStringSubmatch(line); m != nil {
		res.current = m[1]
	} else if res.current != "" && strings.HasPrefix(line, "    ") && !res.inReport {
		if res.logs == nil {
			res.logs = map[string]*ring{}
		}
		r := res.logs[res.current]
		if r == nil {
			r = &ring{max: logLines}
			res.logs[res.current] = r
		}
		r.add(line)
	}
	if m := resultLine.FindStringSubmatch(line); m != nil {
		secs, _ := strconv.ParseFloat(m[3], 64)
		res.durations[m[2]] = secs
		res.inReport = m[1] == "FAIL"
		if res.inReport {
			res.failed = append(res.failed, m[2])
		}
	} else if res.inReport && !strings.HasPrefix(line, " ") {
		// A failed test's report is the indented block under its verdict.
		res.inReport = false
	}
	if res.inReport && len(res.reports) < maxReportLines {
		res.reports = append(res.reports, line)
	}
}

// report is what the failure report shows of the shard: the verdicts of
// its failed tests, each failed test's (or subtest's) last logged lines
// after them, or the shard's last lines when no test reported a verdict
// (a panic, a timeout).
func (res *result) report() []string {
	if len(res.reports) == 0 {
		return res.tail.lines()
	}
	lines := slices.Clone(res.reports)
	for _, l := range res.reports {
		m := failedLine.FindStringSubmatch(l)
		if m == nil || res.logs[m[1]] == nil {
			continue
		}
		lines = append(lines, m[1]+" logged last:")
		lines = append(lines, res.logs[m[1]].lines()...)
	}
	return lines
}

const (
	maxReportLines = 200
	tailLines      = 60
	logLines       = 30
)

// ring keeps the last max lines it was given (tailLines when max is 0).
type ring struct {
	max  int
	buf  []string
	next int
}

func (r *ring) add(line string) {
	limit := r.max
	if limit == 0 {
		limit = tailLines
	}
	if len(r.buf) < limit {
		r.buf = append(r.buf, line)
		return
	}
	r.buf[r.next] = line
	r.next = (r.next + 1) % limit
}

func (r *ring) lines() []string {
	return append(append([]string(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// listTests asks the suite binary which top-level tests match run.
func listTests(ctx context.Context, binary, dir, run string) ([]string, error) {
	cmd := exec.CommandContext(ctx, binary, "-test.list", run)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the e2e tests: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "Test") {
			names = append(names, strings.TrimSpace(line))
		}
	}
	return names, nil
}

// deal assigns tests to at most n shards: groups and single tests, longest
// first, each onto the shard with the least estimated work (LPT), so the
// last shard to finish ends close to total/n or the longest test. Fewer
// shards than n are used when there are fewer units of work.
func deal(names []string, tab *table, n int) []plan {
	type unit struct {
		tests []string
		secs  float64
	}
	byKey := map[string]*unit{}
	var units []*unit
	for _, name := range names {
		key := tab.groupOf(name)
		u, ok := byKey[key]
		if !ok {
			u = &unit{}
			byKey[key] = u
			units = append(units, u)
		}
		u.tests = append(u.tests, name)
		u.secs += tab.seconds(name)
	}
	sort.SliceStable(units, func(i, j int) bool { return units[i].secs > units[j].secs })
	if n > len(units) {
		n = len(units)
	}
	plans := make([]plan, n)
	load := make([]float64, n)
	for _, u := range units {
		least := 0
		for i := range load {
			if load[i] < load[least] {
				least = i
			}
		}
		plans[least].tests = append(plans[least].tests, u.tests...)
		load[least] += u.secs
	}
	for i := range plans {
		plans[i].estimate = time.Duration(load[i] * float64(time.Second))
	}
	return plans
}

// streamLine matches go test -v's header naming the test whose output
// follows.
var streamLine = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)

// failedLine matches a failed test's verdict, top-level or nested.
var failedLine = regexp.MustCompile(`^\s*--- FAIL: (\S+) \(`)

// resultLine matches go test -v's verdict for a top-level test.
var resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (Test\S*) \(([0-9.]+)s\)`)

// runShard runs one shard's tests in its own process, streaming its output
// with the shard's number in front of each line.
func runShard(ctx context.Context, binary, dir string, i, n int, p plan, count int, timeout time.Duration, out *sync.Mutex) result {
	run := p.run
	if run == "" {
		quoted := make([]string, len(p.tests))
		for k, t := range p.tests {
			quoted[k] = regexp.QuoteMeta(t)
		}
		run = "^(" + strings.Join(quoted, "|") + ")$"
	}
	// Not CommandContext: on an interrupt the shard gets SIGINT below and
	// tears its cluster down itself; a SIGKILL would leave the cluster to
	// hack/e2e.sh's reaper.
	// -test.parallel: the tests that call t.Parallel wait on the cluster,
	// not the CPU, so more of them than GOMAXPROCS (go test's default) run
	// at once.
	cmd := exec.Command(binary, "-test.v", "-test.parallel=16", "-test.count="+strconv.Itoa(count), "-test.timeout="+timeout.String(), "-test.run="+run)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), fmt.Sprintf("E2E_SHARD=%d", i+1))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	res := result{durations: map[string]float64{}}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		res.err = err
		return res
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(os.Interrupt)
		case <-done:
		}
	}()
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		prefix := fmt.Sprintf("[%d/%d] ", i+1, n)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			res.observe(line)
			out.Lock()
			fmt.Println(prefix + line)
			out.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	close(done)
	pw.Close()
	<-scanned
	res.wall = time.Since(begin)
	if err != nil {
		res.err = err
	}
	return res
}

func printSlowest(measured map[string]float64, k int) {
	names := make([]string, 0, len(measured))
	for name := range measured {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return measured[names[i]] > measured[names[j]] })
	if len(names) > k {
		names = names[:k]
	}
	for _, name := range names {
		fmt.Printf("e2eshard: slowest: %7.1fs %s\n", measured[name], name)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
