package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The committed result directories and the page that quotes them.
const (
	benchmarksDoc = "../../docs/benchmarks.md"
	resultsRoot   = "../../docs/benchmarks"
	// committedRunsMarker precedes the table of committed runs in
	// benchmarksDoc.
	committedRunsMarker = "<!-- committed-runs:"
)

// TestBenchmarksDocMatchesResults keeps the headline figures that
// docs/benchmarks.md quotes for each committed run equal to the run's
// results.json: prose written after a run drifted from the measurement
// before (the 100k-GPU run's results.json said 1.15× while the text said
// 2.07×, of another run). The files are the measurement; a row that
// differs is fixed in the page, never in the file. Every results.json under
// docs/benchmarks must have a row, so a new run cannot go unquoted.
func TestBenchmarksDocMatchesResults(t *testing.T) {
	rows := committedRunRows(t)
	if len(rows) == 0 {
		t.Fatalf("%s: no rows after %q", benchmarksDoc, committedRunsMarker)
	}
	quoted := map[string]bool{}
	for _, row := range rows {
		dir, run := strings.Trim(row[0], "`"), row[1]
		quoted[dir] = true
		t.Run(dir+"/"+run, func(t *testing.T) {
			want, err := committedRunRow(filepath.Join(resultsRoot, filepath.FromSlash(dir), "results.json"), row[0], run)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, row); diff != "" {
				t.Errorf("%s: the row for %s differs from its results.json (-results.json +doc):\n%s", benchmarksDoc, dir, diff)
			}
		})
	}
	var files []string
	for _, pattern := range []string{"*/results.json", "*/*/results.json"} {
		matches, err := filepath.Glob(filepath.Join(resultsRoot, pattern))
		mustNoError(t, err)
		files = append(files, matches...)
	}
	if len(files) == 0 {
		t.Fatalf("no results.json under %s", resultsRoot)
	}
	for _, f := range files {
		dir, err := filepath.Rel(resultsRoot, filepath.Dir(f))
		mustNoError(t, err)
		if dir = filepath.ToSlash(dir); !quoted[dir] {
			t.Errorf("%s has no row in the committed-runs table of %s", f, benchmarksDoc)
		}
	}
}

// committedRunRows returns the cells of each body row of the table after
// committedRunsMarker.
func committedRunRows(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(benchmarksDoc)
	mustNoError(t, err)
	defer f.Close()
	var rows [][]string
	inTable, lines := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, committedRunsMarker):
			inTable = true
		case !inTable:
		case strings.HasPrefix(line, "|"):
			// The header and its separator come first.
			if lines++; lines > 2 {
				var cells []string
				for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
					cells = append(cells, strings.TrimSpace(c))
				}
				rows = append(rows, cells)
			}
		case lines > 0:
			return rows
		}
	}
	mustNoError(t, sc.Err())
	return rows
}

// committedRunRow writes the row the table should have for the run of kind
// run ("KWOK, …" or "in process, …") in the results.json at path, with
// dirCell as its first cell: the rounds, each scheduler's median pods/s,
// the ratio of the medians, and the median peak memory (RSS for KWOK, heap
// in process) with its ratio, as the report rounds them.
func committedRunRow(path, dirCell, run string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep, err := ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var (
		kind                   string
		nodes, rounds          int
		ours, theirs           float64
		ourMemory, theirMemory uint64
		memory                 string
	)
	switch {
	case strings.HasPrefix(run, "KWOK"):
		s := rep.Scale
		if s == nil {
			return nil, fmt.Errorf("%s has no KWOK scale run", path)
		}
		kind, memory, nodes = "KWOK", "RSS", s.Nodes
		// A report of a single run records no rounds.
		rounds = max(s.Rounds, 1)
		ours, theirs = s.PodsPerSecond[SchedulerLockstep], s.PodsPerSecond[SchedulerKube]
		ourMemory, theirMemory = s.PeakRSSBytes[SchedulerLockstep], s.PeakRSSBytes[SchedulerKube]
	case strings.HasPrefix(run, "in process"):
		ip := rep.InProcess
		if ip == nil {
			return nil, fmt.Errorf("%s has no in-process scale run", path)
		}
		kind, memory, nodes = "in process", "heap", ip.Nodes
		var n1, n2 int
		ours, ourMemory, n1 = ip.Median(SchedulerLockstep)
		theirs, theirMemory, n2 = ip.Median(SchedulerKube)
		rounds = min(n1, n2)
	default:
		return nil, fmt.Errorf("run %q: want KWOK or in process", run)
	}
	if theirs == 0 || theirMemory == 0 {
		return nil, fmt.Errorf("%s: no kube-scheduler figures for the %s run", path, kind)
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }
	return []string{
		dirCell,
		fmt.Sprintf("%s, %s nodes", kind, thousands(nodes)),
		strconv.Itoa(rounds),
		fmt.Sprintf("%.1f", theirs),
		fmt.Sprintf("%.1f", ours),
		fmt.Sprintf("%.2f×", ours/theirs),
		fmt.Sprintf("%s %s / %s MiB (%.2f×)", memory, mib(ourMemory), mib(theirMemory), float64(ourMemory)/float64(theirMemory)),
	}, nil
}

// thousands writes n with a comma between each group of three digits, as
// the page writes node counts.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
