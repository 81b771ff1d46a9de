package lockstep

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCheckpoint(t *testing.T) {
	at := time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, report string
		want         Checkpoint
		// err is a part of the error, naming the field; "" for none.
		err string
	}{
		{name: "s3", report: `{"step": 1200, "time": "2026-12-04T19:00:00Z", "location": "s3://bucket/run/step-1200"}`,
			want: Checkpoint{Step: 1200, Time: at, Location: "s3://bucket/run/step-1200"}},
		{name: "file URI, offset time, unknown fields ignored",
			report: `{"step": 0, "time": "2026-12-04T20:00:00+01:00", "location": "file:///ckpt/0", "rank": 3}`,
			want:   Checkpoint{Step: 0, Time: at, Location: "file:///ckpt/0"}},
		{name: "not JSON", report: `step=5`, err: "not a JSON object"},
		{name: "a list", report: `[1]`, err: "not a JSON object"},
		{name: "two objects", report: `{"step":1,"time":"2026-12-04T19:00:00Z","location":"s3://b/x"}{}`, err: "trailing data"},
		{name: "missing everything", report: `{}`, err: "step: required; time: required; location: required"},
		{name: "negative step", report: `{"step": -1, "time": "2026-12-04T19:00:00Z", "location": "s3://b/x"}`, err: "step: -1 is not a whole number"},
		{name: "fractional step", report: `{"step": 1.5, "time": "2026-12-04T19:00:00Z", "location": "s3://b/x"}`, err: "step: 1.5"},
		{name: "step as a string", report: `{"step": "7", "time": "2026-12-04T19:00:00Z", "location": "s3://b/x"}`, err: `step: "7" is not a whole number`},
		{name: "null step", report: `{"step": null, "time": "2026-12-04T19:00:00Z", "location": "s3://b/x"}`, err: "step: required"},
		{name: "time not RFC 3339", report: `{"step": 1, "time": "yesterday", "location": "s3://b/x"}`, err: `time: "yesterday" is not an RFC 3339 time`},
		{name: "relative location", report: `{"step": 1, "time": "2026-12-04T19:00:00Z", "location": "ckpt/1"}`, err: `location: "ckpt/1" is not an absolute URI`},
		{name: "scheme only", report: `{"step": 1, "time": "2026-12-04T19:00:00Z", "location": "s3:"}`, err: "location:"},
		{name: "space in location", report: `{"step": 1, "time": "2026-12-04T19:00:00Z", "location": "s3://b/a b"}`, err: "space or control character"},
		{name: "long location", report: `{"step": 1, "time": "2026-12-04T19:00:00Z", "location": "s3://b/` + strings.Repeat("x", MaxCheckpointLocation) + `"}`, err: "location: 1031 characters"},
		{name: "long report", report: strings.Repeat(" ", MaxCheckpointReport+1), err: "at most 2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCheckpoint(tc.report)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseCheckpoint: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(tc.want.Time) {
				t.Errorf("time %s, want %s", got.Time, tc.want.Time)
			}
			got.Time = tc.want.Time
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseCheckpoint (-want +got):\n%s", diff)
			}
			// What Format writes reads back the same.
			again, err := ParseCheckpoint(got.Format())
			if err != nil || !again.Time.Equal(got.Time) || again.Step != got.Step || again.Location != got.Location {
				t.Errorf("ParseCheckpoint(%s) = %+v, %v; want %+v", got.Format(), again, err, got)
			}
		})
	}
}

func TestCheckpointInMessage(t *testing.T) {
	ok := `{"step": 9, "time": "2026-12-04T19:00:00Z", "location": "s3://b/9"}`
	for _, tc := range []struct {
		name, msg string
		found     bool
		step      int64
		bad       bool
	}{
		{name: "none", msg: "Traceback...\nRuntimeError: NCCL timeout"},
		{name: "alone", msg: CheckpointMessagePrefix + ok, found: true, step: 9},
		{name: "after other output, indented", msg: "saving\n  " + CheckpointMessagePrefix + ok + "\n", found: true, step: 9},
		{name: "the last counts", msg: CheckpointMessagePrefix + `{"step": 1, "time": "2026-12-04T18:00:00Z", "location": "s3://b/1"}` + "\n" + CheckpointMessagePrefix + ok, found: true, step: 9},
		{name: "a bad last one is not replaced by an earlier", msg: CheckpointMessagePrefix + ok + "\n" + CheckpointMessagePrefix + "{", found: true, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, found, err := CheckpointInMessage(tc.msg)
			if found != tc.found || (err != nil) != tc.bad || (!tc.bad && c.Step != tc.step) {
				t.Errorf("CheckpointInMessage = %+v, %v, %v; want step %d, found %v, bad %v", c, found, err, tc.step, tc.found, tc.bad)
			}
		})
	}
}

func TestCheckpointBelievable(t *testing.T) {
	now := time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{now.Add(-time.Hour), true},
		{now, true},
		{now.Add(CheckpointClockSkew), true},
		{now.Add(CheckpointClockSkew + time.Second), false},
	} {
		if got := (Checkpoint{Time: tc.at}).Believable(now); got != tc.want {
			t.Errorf("a checkpoint at now%+v: believable %v, want %v", tc.at.Sub(now), got, tc.want)
		}
	}
}
