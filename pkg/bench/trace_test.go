package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	header        = TraceHeader + "\n"
	cfHeader      = TraceHeaderCommFraction + "\n"
	prioHeader    = TraceHeaderPriority + "\n"
	bothHeader    = TraceHeaderAll + "\n"
	headerProblem = " must be exactly " + TraceHeader + ", optionally followed by comm_fraction and then priority, e.g. " + TraceHeaderAll
)

func TestParseTrace(t *testing.T) {
	tests := []struct {
		name  string
		trace string
		want  []Job
	}{
		{
			name: "comments, blank lines, spaces and unsorted rows",
			trace: "# a comment before the header\n\n" + header +
				"b-job,30,2,8,120,leaf:Preferred\n" +
				"# a comment between rows\n" +
				"a-job, 30 ,1,1,0.5,\n" +
				"first,0,4,8,600.25,leaf:Required\n",
			want: []Job{
				{ID: "first", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 600250 * time.Millisecond, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}},
				{ID: "a-job", Submit: 30 * time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: 500 * time.Millisecond},
				{ID: "b-job", Submit: 30 * time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: 2 * time.Minute, Topology: &Constraint{Level: "leaf", Mode: ModePreferred}},
			},
		},
		{
			name:  "nanosecond seconds, CPU-only pods and the largest ID and GPU count",
			trace: header + "cpu,0.000000001,3,0,1.5,\n" + strings.Repeat("x", 40) + ",1,1,64,0.000000001,\n",
			want: []Job{
				{ID: "cpu", Submit: 1, Replicas: 3, GPUsPerReplica: 0, Duration: 1500 * time.Millisecond},
				{ID: strings.Repeat("x", 40), Submit: time.Second, Replicas: 1, GPUsPerReplica: 64, Duration: 1},
			},
		},
		{
			name: "comm_fraction column, given and left empty",
			trace: cfHeader +
				"a,0,4,8,600,leaf:Required,0.45\n" +
				"b,1,2,8,60,,\n" +
				"c,2,1,1,60,, 0 \n",
			want: []Job{
				{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}, CommFraction: ptr(0.45)},
				{ID: "b", Submit: time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: time.Minute},
				{ID: "c", Submit: 2 * time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Minute, CommFraction: ptr(0.0)},
			},
		},
		{
			name: "priority column, given and left empty",
			trace: prioHeader +
				"a,0,4,8,600,leaf:Required,bench-high\n" +
				"b,1,2,8,60,, bench-low \n" +
				"c,2,1,1,60,,\n",
			want: []Job{
				{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}, Priority: PriorityHigh},
				{ID: "b", Submit: time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: time.Minute, Priority: PriorityLow},
				{ID: "c", Submit: 2 * time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Minute},
			},
		},
		{
			name: "both optional columns",
			trace: bothHeader +
				"a,0,4,8,600,,0.45,bench-high\n" +
				"b,1,2,8,60,,,bench-low\n" +
				"c,2,1,1,60,,0.1,\n",
			want: []Job{
				{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, CommFraction: ptr(0.45), Priority: PriorityHigh},
				{ID: "b", Submit: time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: time.Minute, Priority: PriorityLow},
				{ID: "c", Submit: 2 * time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Minute, CommFraction: ptr(0.1)},
			},
		},
		{
			name:  "CRLF line endings",
			trace: "job_id,submit_s,replicas,gpus_per_replica,duration_s,topology\r\nj,1,1,1,1,\r\n",
			want:  []Job{{ID: "j", Submit: time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Second}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrace(strings.NewReader(tc.trace))
			if err != nil {
				t.Fatalf("ParseTrace: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseTrace (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseTraceErrors(t *testing.T) {
	tests := []struct {
		name  string
		trace string
		want  string
	}{
		{"empty", "", "trace line 1: the trace is empty: start it with the header " + TraceHeader},
		{"only comments", "# nothing\n", "trace line 1: the trace is empty: start it with the header " + TraceHeader},
		{"wrong header", "id,submit,replicas\n", `trace line 1: header is "id,submit,replicas": the first line that is not a comment` + headerProblem},
		{"header after comment", "# c\njob_id,submit_s\n", `trace line 2: header is "job_id,submit_s": the first line that is not a comment` + headerProblem},
		{"optional columns out of order", TraceHeaderPriority + ",comm_fraction\n", `trace line 1: header is "` + TraceHeaderPriority + `,comm_fraction": the first line that is not a comment` + headerProblem},
		{"optional column twice", TraceHeaderPriority + ",priority\n", `trace line 1: header is "` + TraceHeaderPriority + `,priority": the first line that is not a comment` + headerProblem},
		{"unknown optional column", TraceHeader + ",queue\n", `trace line 1: header is "` + TraceHeader + `,queue": the first line that is not a comment` + headerProblem},
		{"no jobs", header, "trace line 1: the trace has no jobs: add one line per job after the header"},
		{"too few fields", header + "a,0,1,1,1\n", "trace line 2: 5 fields, want 6 (" + TraceHeader + "); leave topology empty but keep its comma"},
		{"too many fields", header + "a,0,1,1,1,,x\n", "trace line 2: 7 fields, want 6 (" + TraceHeader + "); leave topology empty but keep its comma"},
		{"bare quote", header + "a,0,1,1,1,\nb\"c,0,1,1,1,\n", `trace line 3, column 2 (csv): bare " in non-quoted-field: quote a field containing quotes as "a ""b"" c", or remove the quotes`},
		{"empty ID", header + ",0,1,1,1,\n", "trace line 2, column 1 (job_id): job ID is empty: name the job, e.g. job-001"},
		{"upper-case ID", header + "Job-1,0,1,1,1,\n", `trace line 2, column 1 (job_id): job ID "Job-1" is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit`},
		{"ID ending in a dash", header + "job-,0,1,1,1,\n", `trace line 2, column 1 (job_id): job ID "job-" is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit`},
		{"long ID", header + strings.Repeat("a", 41) + ",0,1,1,1,\n", `trace line 2, column 1 (job_id): job ID "` + strings.Repeat("a", 41) + `" has 41 characters: shorten it to at most 40`},
		{"duplicate ID", header + "a,0,1,1,1,\nb,0,1,1,1,\na,5,1,1,1,\n", `trace line 4, column 1 (job_id): job "a" is already defined on line 2: give every job its own ID`},
		{"submit not a number", header + "a,soon,1,1,1,\n", `trace line 2, column 3 (submit_s): "soon" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"submit with a unit", header + "a,5s,1,1,1,\n", `trace line 2, column 3 (submit_s): "5s" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"submit with an exponent", header + "a,1e3,1,1,1,\n", `trace line 2, column 3 (submit_s): "1e3" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"submit with two dots", header + "a,1.2.3,1,1,1,\n", `trace line 2, column 3 (submit_s): "1.2.3" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"submit only a dot", header + "a,.,1,1,1,\n", `trace line 2, column 3 (submit_s): "." is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"empty submit", header + "a,,1,1,1,\n", `trace line 2, column 3 (submit_s): "" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"negative submit", header + "a,-1,1,1,1,\n", `trace line 2, column 3 (submit_s): "-1" is negative: give seconds at least 0`},
		{"submit out of range", header + "a,99999999999,1,1,1,\n", `trace line 2, column 3 (submit_s): "99999999999" seconds is out of range: keep times below 290 years`},
		{"replicas not a number", header + "a,0,two,1,1,\n", `trace line 2, column 5 (replicas): "two" is not a whole number: write digits only, e.g. 8`},
		{"zero replicas", header + "a,0,0,1,1,\n", "trace line 2, column 5 (replicas): replicas = 0: a job needs at least 1 pod"},
		{"negative replicas", header + "a,0,-2,1,1,\n", "trace line 2, column 5 (replicas): replicas = -2: a job needs at least 1 pod"},
		{"GPUs not a number", header + "a,0,1,1.5,1,\n", `trace line 2, column 7 (gpus_per_replica): "1.5" is not a whole number: write digits only, e.g. 8`},
		{"too many GPUs", header + "a,0,1,65,1,\n", "trace line 2, column 7 (gpus_per_replica): gpus_per_replica = 65: give 0 to 64 GPUs per pod"},
		{"negative GPUs", header + "a,0,1,-1,1,\n", "trace line 2, column 7 (gpus_per_replica): gpus_per_replica = -1: give 0 to 64 GPUs per pod"},
		{"duration not a number", header + "a,0,1,1,1h,\n", `trace line 2, column 9 (duration_s): "1h" is not decimal seconds: write digits with an optional '.', e.g. 90 or 1.5`},
		{"zero duration", header + "a,0,1,1,0,\n", "trace line 2, column 9 (duration_s): duration 0s: pods must run for more than 0 s"},
		{"negative duration", header + "a,0,1,1,-3,\n", `trace line 2, column 9 (duration_s): "-3" is negative: give seconds at least 0`},
		{"topology without mode", header + "a,0,2,8,1,leaf\n", `trace line 2, column 11 (topology): topology "leaf" has no mode: write <level>:Required or <level>:Preferred, e.g. leaf:Required, or leave it empty`},
		{"topology bad mode", header + "a,0,2,8,1,leaf:required\n", `trace line 2, column 11 (topology): topology mode "required": use Required or Preferred, e.g. leaf:Required`},
		{"topology empty level", header + "a,0,2,8,1,:Required\n", `trace line 2, column 11 (topology): topology level "" is not a level name: name a level of the cluster model, e.g. leaf:Required`},
		{"topology bad level", header + "a,0,2,8,1,Leaf Switch:Required\n", `trace line 2, column 11 (topology): topology level "Leaf Switch" is not a level name: name a level of the cluster model, e.g. leaf:Required`},
		{"comm_fraction column missing in a row", cfHeader + "a,0,2,8,1,\n", "trace line 2: 6 fields, want 7 (" + TraceHeaderCommFraction + "); leave topology empty but keep its comma"},
		{"comm_fraction not a number", cfHeader + "a,0,2,8,1,,lots\n", `trace line 2, column 12 (comm_fraction): "lots" is not a decimal fraction: write digits with an optional '.', e.g. 0.3, or leave it empty for the default`},
		{"comm_fraction with an exponent", cfHeader + "a,0,2,8,1,,1e-1\n", `trace line 2, column 12 (comm_fraction): "1e-1" is not a decimal fraction: write digits with an optional '.', e.g. 0.3, or leave it empty for the default`},
		{"comm_fraction of 1", cfHeader + "a,0,2,8,1,,1\n", "trace line 2, column 12 (comm_fraction): comm_fraction 1: give the share of step time in collectives at ideal placement, at least 0 and below 1, e.g. 0.3, or leave it empty for the default"},
		{"negative comm_fraction", cfHeader + "a,0,2,8,1,,-0.1\n", "trace line 2, column 12 (comm_fraction): comm_fraction -0.1: give the share of step time in collectives at ideal placement, at least 0 and below 1, e.g. 0.3, or leave it empty for the default"},
		{"priority column missing in a row", prioHeader + "a,0,2,8,1,\n", "trace line 2: 6 fields, want 7 (" + TraceHeaderPriority + "); leave topology empty but keep its comma"},
		{"unknown priority class", prioHeader + "a,0,2,8,1,,bench-low\nb,0,2,8,1,,urgent\n", `trace line 3, column 12 (priority): priority class "urgent" is not one of the benchmark's: name bench-high or bench-low, or leave it empty for none`},
		{"priority class in the wrong case", bothHeader + "a,0,2,8,1,,0.3,Bench-High\n", `trace line 2, column 16 (priority): priority class "Bench-High" is not one of the benchmark's: name bench-high or bench-low, or leave it empty for none`},
		{"comm_fraction error named with both columns", bothHeader + "a,0,2,8,1,,lots,bench-low\n", `trace line 2, column 12 (comm_fraction): "lots" is not a decimal fraction: write digits with an optional '.', e.g. 0.3, or leave it empty for the default`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(tc.trace))
			if err == nil {
				t.Fatalf("ParseTrace succeeded, want error %q", tc.want)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("ParseTrace error (-want,+got):\n%s", diff)
			}
			var te *TraceError
			if !errors.As(err, &te) {
				t.Errorf("error %T is not a *TraceError", err)
			}
		})
	}
}

func TestParseTraceReadError(t *testing.T) {
	_, err := ParseTrace(&failingReader{data: header + "a,0,1,1,1,\n"})
	if err == nil || !strings.Contains(err.Error(), "reading the trace: disk on fire") {
		t.Errorf("ParseTrace error = %v, want the read error wrapped", err)
	}
}

// failingReader returns data, then an error.
type failingReader struct{ data string }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, errors.New("disk on fire")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestWriteTraceRoundTrip(t *testing.T) {
	jobs := []Job{
		{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}},
		{ID: "b", Submit: 1500 * time.Millisecond, Replicas: 1, GPUsPerReplica: 1, Duration: 1},
		{ID: "c", Submit: 3*time.Hour + 7, Replicas: 2, GPUsPerReplica: 0, Duration: 123456789 * time.Microsecond, Topology: &Constraint{Level: "spine", Mode: ModePreferred}},
	}
	var buf bytes.Buffer
	mustNoError(t, WriteTrace(&buf, jobs))
	wantText := header +
		"a,0,4,8,600,leaf:Required\n" +
		"b,1.5,1,1,0.000000001,\n" +
		"c,10800.000000007,2,0,123.456789,spine:Preferred\n"
	if diff := cmp.Diff(wantText, buf.String()); diff != "" {
		t.Errorf("WriteTrace (-want,+got):\n%s", diff)
	}
	got, err := ParseTrace(&buf)
	mustNoError(t, err)
	if diff := cmp.Diff(jobs, got); diff != "" {
		t.Errorf("ParseTrace(WriteTrace(jobs)) (-want,+got):\n%s", diff)
	}
}

func TestWriteTraceCommFractionRoundTrip(t *testing.T) {
	jobs := []Job{
		{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, CommFraction: ptr(0.35)},
		{ID: "b", Submit: time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Second},
	}
	var buf bytes.Buffer
	mustNoError(t, WriteTrace(&buf, jobs))
	wantText := cfHeader +
		"a,0,4,8,600,,0.35\n" +
		"b,1,1,1,1,,\n"
	if diff := cmp.Diff(wantText, buf.String()); diff != "" {
		t.Errorf("WriteTrace (-want,+got):\n%s", diff)
	}
	got, err := ParseTrace(&buf)
	mustNoError(t, err)
	if diff := cmp.Diff(jobs, got); diff != "" {
		t.Errorf("ParseTrace(WriteTrace(jobs)) (-want,+got):\n%s", diff)
	}
}

func TestWriteTracePriorityRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		jobs     []Job
		wantText string
	}{
		{
			name: "priority only",
			jobs: []Job{
				{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, Priority: PriorityHigh},
				{ID: "b", Submit: time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Second},
			},
			wantText: prioHeader + "a,0,4,8,600,,bench-high\n" + "b,1,1,1,1,,\n",
		},
		{
			name: "priority and comm_fraction",
			jobs: []Job{
				{ID: "a", Submit: 0, Replicas: 4, GPUsPerReplica: 8, Duration: 10 * time.Minute, CommFraction: ptr(0.35), Priority: PriorityLow},
				{ID: "b", Submit: time.Second, Replicas: 1, GPUsPerReplica: 1, Duration: time.Second, Priority: PriorityHigh},
			},
			wantText: bothHeader + "a,0,4,8,600,,0.35,bench-low\n" + "b,1,1,1,1,,,bench-high\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			mustNoError(t, WriteTrace(&buf, tc.jobs))
			if diff := cmp.Diff(tc.wantText, buf.String()); diff != "" {
				t.Errorf("WriteTrace (-want,+got):\n%s", diff)
			}
			got, err := ParseTrace(&buf)
			mustNoError(t, err)
			if diff := cmp.Diff(tc.jobs, got); diff != "" {
				t.Errorf("ParseTrace(WriteTrace(jobs)) (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestWriteTraceRejectsInvalidJobs(t *testing.T) {
	valid := Job{ID: "a", Replicas: 1, GPUsPerReplica: 1, Duration: time.Second}
	tests := []struct {
		name string
		jobs []Job
		want string
	}{
		{"bad ID", []Job{valid, {ID: "A_1", Replicas: 1, Duration: time.Second}},
			`jobs[1]: job "A_1": job_id: job ID "A_1" is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit`},
		{"several problems", []Job{{ID: "x", Submit: -1, Replicas: 0, GPUsPerReplica: 99, Topology: &Constraint{Level: "leaf", Mode: "Maybe"}}},
			"jobs[0]: job \"x\": submit_s: submit time -1ns is negative: give seconds from the trace start, at least 0\n" +
				"replicas: replicas = 0: a job needs at least 1 pod\n" +
				"gpus_per_replica: gpus_per_replica = 99: give 0 to 64 GPUs per pod\n" +
				"duration_s: duration 0s: pods must run for more than 0 s\n" +
				`topology: topology mode "Maybe": use Required or Preferred, e.g. leaf:Required`},
		{"duplicate", []Job{valid, valid}, `jobs[1]: ID "a" is also jobs[0]'s`},
		{"comm_fraction of 1", []Job{{ID: "a", Replicas: 2, GPUsPerReplica: 8, Duration: time.Second, CommFraction: ptr(1.0)}},
			`jobs[0]: job "a": comm_fraction: comm_fraction 1: give the share of step time in collectives at ideal placement, at least 0 and below 1, e.g. 0.3, or leave it empty for the default`},
		{"unknown priority class", []Job{valid, {ID: "b", Replicas: 1, Duration: time.Second, Priority: "system-node-critical"}},
			`jobs[1]: job "b": priority: priority class "system-node-critical" is not one of the benchmark's: name bench-high or bench-low, or leave it empty for none`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteTrace(&buf, tc.jobs)
			if err == nil {
				t.Fatalf("WriteTrace succeeded, want %q", tc.want)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("WriteTrace error (-want,+got):\n%s", diff)
			}
			if buf.Len() != 0 {
				t.Errorf("WriteTrace wrote %q before failing", buf.String())
			}
		})
	}
}

func TestCompress(t *testing.T) {
	leaf := &Constraint{Level: "leaf", Mode: ModeRequired}
	jobs := []Job{
		{ID: "a", Submit: 100 * time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: 10 * time.Minute, Topology: leaf},
		{ID: "b", Submit: 0, Replicas: 1, GPUsPerReplica: 1, Duration: 3},
	}
	tests := []struct {
		name   string
		factor float64
		want   []Job
	}{
		{"factor 10", 10, []Job{
			{ID: "a", Submit: 10 * time.Second, Replicas: 2, GPUsPerReplica: 8, Duration: time.Minute, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}},
			// 3 ns / 10 rounds to 0; durations stay positive.
			{ID: "b", Submit: 0, Replicas: 1, GPUsPerReplica: 1, Duration: 1},
		}},
		{"factor 1.5 rounds to the nanosecond", 1.5, []Job{
			{ID: "a", Submit: 66666666667, Replicas: 2, GPUsPerReplica: 8, Duration: 400 * time.Second, Topology: &Constraint{Level: "leaf", Mode: ModeRequired}},
			{ID: "b", Submit: 0, Replicas: 1, GPUsPerReplica: 1, Duration: 2},
		}},
		{"factor 1 is the identity", 1, jobs},
		{"factor below 1 is the identity", 0.5, jobs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compress(jobs, tc.factor)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Compress(%v) (-want,+got):\n%s", tc.factor, diff)
			}
			if len(got) > 0 && got[0].Topology == jobs[0].Topology {
				t.Error("Compress shares the input's Constraint")
			}
		})
	}
	if jobs[0].Submit != 100*time.Second || leaf.Mode != ModeRequired {
		t.Errorf("Compress modified its input: %+v", jobs[0])
	}
}
