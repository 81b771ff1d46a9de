package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDeal(t *testing.T) {
	tab := &table{
		groups: [][]string{{"TestKueue", "TestExamples"}},
		secs: map[string]float64{
			"TestA": 100, "TestB": 60, "TestC": 50, "TestD": 40,
			"TestKueueOne": 20, "TestKueueTwo": 20, "TestExamplesRun": 30,
		},
	}
	tests := []struct {
		name   string
		names  []string
		shards int
		want   [][]string
	}{{
		name:   "longest first onto the least loaded shard; a group stays whole",
		names:  []string{"TestA", "TestB", "TestC", "TestD", "TestKueueOne", "TestKueueTwo", "TestExamplesRun"},
		shards: 3,
		// Units: A 100, group 70, B 60, C 50, D 40.
		want: [][]string{{"TestA"}, {"TestKueueOne", "TestKueueTwo", "TestExamplesRun", "TestD"}, {"TestB", "TestC"}},
	}, {
		name:   "unmeasured tests count as defaultSeconds",
		names:  []string{"TestNew1", "TestNew2", "TestD"},
		shards: 2,
		want:   [][]string{{"TestD"}, {"TestNew1", "TestNew2"}},
	}, {
		name:   "no more shards than units of work",
		names:  []string{"TestKueueOne", "TestKueueTwo"},
		shards: 4,
		want:   [][]string{{"TestKueueOne", "TestKueueTwo"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]string
			var total time.Duration
			for _, p := range deal(tc.names, tab, tc.shards) {
				got = append(got, p.tests)
				total += p.estimate
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("deal (-want +got):\n%s", diff)
			}
			var want float64
			for _, n := range tc.names {
				want += tab.seconds(n)
			}
			if total != time.Duration(want*float64(time.Second)) {
				t.Errorf("estimates sum to %s, want %gs", total, want)
			}
		})
	}
}

func TestTableRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shards.txt")
	in := "# header\n# more\ngroup TestKueue TestExamples\nTestA 1.5\nTestB 2.0\n"
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := readTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.write(path, map[string]float64{"TestB": 3, "TestC": 4.25}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# header\n# more\ngroup TestKueue TestExamples\nTestA 1.5\nTestB 3.0\nTestC 4.2\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("rewritten table (-want +got):\n%s", diff)
	}
}

func TestReadTableRefusesMalformedLines(t *testing.T) {
	for _, line := range []string{"TestA", "TestA x", "TestA -1", "TestA 1 2"} {
		path := filepath.Join(t.TempDir(), "shards.txt")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readTable(path); err == nil {
			t.Errorf("readTable accepted %q", line)
		}
	}
}

// TestShardsTableListsEveryTest keeps the committed table honest: every
// test it names exists in the suite (a renamed test would otherwise be
// dealt as unmeasured and unbalance the shards).
func TestShardsTableListsEveryTest(t *testing.T) {
	tab, err := readTable(filepath.Join("..", "..", "test", "e2e", "shards.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	files, err := filepath.Glob(filepath.Join("..", "..", "test", "e2e", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, name := range testFuncs(t, f) {
			defined[name] = true
		}
	}
	var stale, missing []string
	for name := range tab.secs {
		if !defined[name] {
			stale = append(stale, name)
		}
	}
	for name := range defined {
		if _, ok := tab.secs[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(stale)
	sort.Strings(missing)
	if len(stale) > 0 || len(missing) > 0 {
		t.Errorf("test/e2e/shards.txt is out of date: it names tests that do not exist %v and lacks %v; "+
			"run them (go run ./hack/e2eshard -update -run REGEXP) or add \"NAME SECONDS\" lines", stale, missing)
	}
}

// testFuncs lists the top-level tests a file declares (TestMain aside).
func testFuncs(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
			continue
		}
		names = append(names, fn.Name.Name)
	}
	return names
}

// TestObserveKeepsFailureReports keeps each failed test's verdicts and,
// after them, what each failed test and subtest logged last (go test -v
// streams a message under its test's "=== RUN", "CONT" or "NAME" header,
// not under its verdict), and nothing of the passing tests around them.
// The output is go 1.26's, parallel tests and subtests included.
func TestObserveKeepsFailureReports(t *testing.T) {
	out := `=== RUN   TestA
--- PASS: TestA (1.50s)
=== RUN   TestB
    b_test.go:10: setting up
=== RUN   TestB/ok
    b_test.go:12: fine
=== RUN   TestB/sub
    b_test.go:30: wanted 4 pods
        (-want +got): pod-3
=== NAME  TestB
    b_test.go:20: gang 3 never ran
I1128 09:00:00.000000   1 component.go:1] not a test's line
--- FAIL: TestB (2.00s)
    --- PASS: TestB/ok (0.10s)
    --- FAIL: TestB/sub (0.10s)
=== RUN   TestC
=== PAUSE TestC
=== RUN   TestD
=== PAUSE TestD
=== CONT  TestC
    c_test.go:5: unrelated
=== CONT  TestD
    d_test.go:7: d failed
--- FAIL: TestD (0.40s)
=== NAME  TestC
--- PASS: TestC (0.30s)
FAIL
`
	res := result{durations: map[string]float64{}}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		res.observe(line)
	}
	if diff := cmp.Diff(map[string]float64{"TestA": 1.5, "TestB": 2, "TestC": 0.3, "TestD": 0.4}, res.durations); diff != "" {
		t.Errorf("durations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"TestB", "TestD"}, res.failed); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	wantReport := []string{
		"--- FAIL: TestB (2.00s)",
		"    --- PASS: TestB/ok (0.10s)",
		"    --- FAIL: TestB/sub (0.10s)",
		"--- FAIL: TestD (0.40s)",
		"TestB logged last:",
		"    b_test.go:10: setting up",
		"    b_test.go:20: gang 3 never ran",
		"TestB/sub logged last:",
		"    b_test.go:30: wanted 4 pods",
		"        (-want +got): pod-3",
		"TestD logged last:",
		"    d_test.go:7: d failed",
	}
	if diff := cmp.Diff(wantReport, res.report()); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if got := res.tail.lines(); got[len(got)-1] != "FAIL" || len(got) != 27 {
		t.Errorf("tail = %q, want all 27 lines ending in FAIL", got)
	}

	// A shard that died before any verdict: its last lines.
	died := result{durations: map[string]float64{}}
	for _, line := range []string{"=== RUN   TestE", "    e_test.go:1: waiting", "panic: boom"} {
		died.observe(line)
	}
	if diff := cmp.Diff([]string{"=== RUN   TestE", "    e_test.go:1: waiting", "panic: boom"}, died.report()); diff != "" {
		t.Errorf("report of a shard without verdicts (-want +got):\n%s", diff)
	}
}

// TestLogsKeepTheLastLines keeps at most logLines lines a test logged.
func TestLogsKeepTheLastLines(t *testing.T) {
	res := result{durations: map[string]float64{}}
	res.observe("=== RUN   TestF")
	var want []string
	for i := range logLines + 5 {
		line := "    f_test.go:1: " + strconv.Itoa(i)
		res.observe(line)
		want = append(want, line)
	}
	res.observe("--- FAIL: TestF (1.00s)")
	got := res.report()
	if diff := cmp.Diff(append([]string{"--- FAIL: TestF (1.00s)", "TestF logged last:"}, want[5:]...), got); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

// TestRingKeepsTheLastLines keeps the newest tailLines lines in order.
func TestRingKeepsTheLastLines(t *testing.T) {
	var r ring
	var want []string
	for i := range tailLines + 7 {
		line := strconv.Itoa(i)
		r.add(line)
		want = append(want, line)
	}
	if diff := cmp.Diff(want[7:], r.lines()); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}
