package lockstep

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNoticeRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 500, time.UTC)
	n := Notice{By: "team/urgent", Time: at, Deadline: at.Add(time.Minute)}
	got, err := ParseNotice(n.Format())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(n, got); diff != "" {
		t.Errorf("ParseNotice(Format()) (-want,+got):\n%s", diff)
	}
	for _, bad := range []string{"", "{", `{"by":"x","time":"2026-12-07T10:00:00Z"}`, `{"time":"2026-12-07T10:00:00Z","deadline":"2026-12-07T10:01:00Z"}`,
		`{"by":"x","time":"2026-12-07T10:00:00Z","deadline":"2026-12-07T09:00:00Z"}`, `{"by":"x","time":"2026-12-07T10:00:00Z","deadline":"2026-12-07T10:01:00Z","extra":1}`} {
		if _, err := ParseNotice(bad); err == nil {
			t.Errorf("ParseNotice(%q) succeeded", bad)
		}
	}
}

func TestNoticeOf(t *testing.T) {
	for raw, want := range map[string]time.Duration{"": 0, "0": 0, "-5": 0, "x": 0, "1.5": 0, "90": 90 * time.Second, "7200": MaxPreemptionNotice} {
		if got := NoticeOf(map[string]string{AnnotationPreemptionNoticeSeconds: raw}); got != want {
			t.Errorf("NoticeOf(%q) = %s, want %s", raw, got, want)
		}
	}
}

// A report answers a notice when it was made at or after it, and only
// when it is believable.
func TestNoticeAnswered(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	n := Notice{By: "team/urgent", Time: at, Deadline: at.Add(time.Minute)}
	report := func(when time.Time) map[string]string {
		return map[string]string{AnnotationCheckpoint: Checkpoint{Step: 1, Time: when, Location: "s3://b/1"}.Format()}
	}
	now := at.Add(10 * time.Second)
	for name, tc := range map[string]struct {
		annotations map[string]string
		want        bool
	}{
		"no report":                      {nil, false},
		"before the notice":              {report(at.Add(-time.Second)), false},
		"at the notice":                  {report(at), true},
		"after the notice":               {report(now), true},
		"ahead of the clock beyond skew": {report(now.Add(2 * CheckpointClockSkew)), false},
		"malformed":                      {map[string]string{AnnotationCheckpoint: "{"}, false},
	} {
		if got := n.Answered(tc.annotations, now); got != tc.want {
			t.Errorf("%s: Answered = %v, want %v", name, got, tc.want)
		}
	}
}
