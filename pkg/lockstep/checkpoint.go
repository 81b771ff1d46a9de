package lockstep

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The checkpoint protocol (docs/controller.md, "Checkpoints"): a rank of a
// TrainingJob says it wrote a checkpoint it can resume from by annotating
// its own pod, or, while exiting, in its container's termination message;
// the controller folds the newest report of the running incarnation into
// the job's status.checkpoint and hands it to every later incarnation in
// its environment, and the scheduler costs evicting the job by the work
// since then.
const (
	// AnnotationCheckpoint on a pod of a TrainingJob is the rank's latest
	// checkpoint report: a JSON object {"step": S, "time": T, "location":
	// U} (Checkpoint). The job's pods may write it on themselves and
	// nothing else (deploy/default/checkpoint-policy.yaml).
	AnnotationCheckpoint = "lockstep.dev/checkpoint"
	// CheckpointMessagePrefix starts a line of a container's termination
	// message that is a checkpoint report: the prefix, then the JSON
	// object of AnnotationCheckpoint. A rank that checkpoints on its way
	// out (a SIGTERM) reports this way with no permission at all; the
	// last such line counts.
	CheckpointMessagePrefix = AnnotationCheckpoint + "="

	// EnvResumeFrom and EnvResumeStep carry the job's last checkpoint
	// (status.checkpoint) into every container of an incarnation created
	// after it was reported: where to resume from and its step. Unset
	// when the job has none.
	EnvResumeFrom = "LOCKSTEP_RESUME_FROM"
	EnvResumeStep = "LOCKSTEP_RESUME_STEP"

	// AnnotationRestartOverhead on a job's pods is its
	// runPolicy.restartOverheadSeconds, for the scheduler to cost their
	// eviction by (placement.Victim.RestartOverhead). The controller sets
	// it; absent means 0.
	AnnotationRestartOverhead = "lockstep.dev/restart-overhead-seconds"

	// MaxCheckpointReport bounds a report's length, and
	// MaxCheckpointLocation its location's: a report is a pointer to a
	// checkpoint, not a place to put one.
	MaxCheckpointReport   = 2048
	MaxCheckpointLocation = 1024
	// CheckpointClockSkew is how far ahead of the reader's clock a
	// report's time may be: a rank's clock ahead by more would make the
	// job look freshly checkpointed for as long, and cost its eviction at
	// nothing.
	CheckpointClockSkew = time.Minute
)

// Checkpoint is one checkpoint report.
type Checkpoint struct {
	// Step is the training step the checkpoint holds, at least 0.
	Step int64 `json:"step"`
	// Time is when the checkpoint was complete (RFC 3339).
	Time time.Time `json:"time"`
	// Location is where it is, an absolute URI (s3://bucket/run/step-100,
	// file:///checkpoints/run/100).
	Location string `json:"location"`
}

// ParseCheckpoint reads a report: AnnotationCheckpoint's value, or a
// termination message line without its prefix. Its errors name the field
// at fault, for the Warning event a malformed report gets.
func ParseCheckpoint(report string) (Checkpoint, error) {
	if len(report) > MaxCheckpointReport {
		return Checkpoint{}, fmt.Errorf("the report is %d bytes, at most %d", len(report), MaxCheckpointReport)
	}
	var raw struct {
		Step     json.RawMessage `json:"step"`
		Time     *string         `json:"time"`
		Location *string         `json:"location"`
	}
	dec := json.NewDecoder(strings.NewReader(report))
	if err := dec.Decode(&raw); err != nil {
		return Checkpoint{}, fmt.Errorf(`not a JSON object {"step": S, "time": T, "location": U}: %w`, err)
	}
	if dec.More() {
		return Checkpoint{}, errors.New("trailing data after the JSON object")
	}
	var c Checkpoint
	var errs []string
	switch {
	case raw.Step == nil || string(raw.Step) == "null":
		errs = append(errs, "step: required")
	default:
		// A JSON number, whole: not a string, not 1.5, not 1e3.
		n, err := strconv.ParseInt(string(raw.Step), 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("step: %s is not a whole number of at least 0", raw.Step))
		}
		c.Step = n
	}
	switch {
	case raw.Time == nil:
		errs = append(errs, "time: required")
	default:
		t, err := time.Parse(time.RFC3339Nano, *raw.Time)
		if err != nil {
			errs = append(errs, fmt.Sprintf("time: %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", *raw.Time))
		}
		c.Time = t
	}
	switch {
	case raw.Location == nil:
		errs = append(errs, "location: required")
	default:
		c.Location = *raw.Location
		if err := validLocation(c.Location); err != nil {
			errs = append(errs, "location: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return Checkpoint{}, errors.New(strings.Join(errs, "; "))
	}
	return c, nil
}

// validLocation accepts an absolute URI with a scheme and something after
// it, of printable characters.
func validLocation(loc string) error {
	if len(loc) > MaxCheckpointLocation {
		return fmt.Errorf("%d characters, at most %d", len(loc), MaxCheckpointLocation)
	}
	for _, r := range loc {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%q holds a space or control character", loc)
		}
	}
	u, err := url.Parse(loc)
	if err != nil || u.Scheme == "" || (u.Opaque == "" && u.Host == "" && u.Path == "") {
		return fmt.Errorf("%q is not an absolute URI (s3://bucket/path, file:///path)", loc)
	}
	return nil
}

// Format is the report's wire form, which ParseCheckpoint reads back.
func (c Checkpoint) Format() string {
	out, _ := json.Marshal(struct {
		Step     int64  `json:"step"`
		Time     string `json:"time"`
		Location string `json:"location"`
	}{c.Step, c.Time.UTC().Format(time.RFC3339Nano), c.Location})
	return string(out)
}

// Believable reports whether the checkpoint's time is at most
// CheckpointClockSkew ahead of now: the controller ignores (and warns
// about) a report that is not, and the scheduler costs such a job by its
// run time.
func (c Checkpoint) Believable(now time.Time) bool {
	return !c.Time.After(now.Add(CheckpointClockSkew))
}

// CheckpointInMessage finds the last checkpoint report in a termination
// message (CheckpointMessagePrefix). found is false when the message has
// none; err is the last report's fault when it does not parse.
func CheckpointInMessage(msg string) (c Checkpoint, found bool, err error) {
	lines := strings.Split(msg, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		report, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), CheckpointMessagePrefix)
		if !ok {
			continue
		}
		c, err := ParseCheckpoint(report)
		return c, true, err
	}
	return Checkpoint{}, false, nil
}
