package lockstep

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The preemption notice (docs/controller.md, "Preemption notice"): before
// the scheduler evicts a victim of gang preemption, or the controller
// deletes the pods of a job Kueue suspends, a job that asked for notice
// (runPolicy.preemptionNoticeSeconds) has every pod annotated with
// AnnotationPreemptionNotice. A trainer watches it through a downward-API
// volume, which the kubelet keeps current, checkpoints and reports
// (AnnotationCheckpoint); the pods are deleted once a report answers the
// notice (Notice.AnsweredBy), one of them goes, or the deadline passes.
const (
	// AnnotationPreemptionNotice on a pod says its job is about to be
	// evicted: a JSON object {"by": B, "time": T, "deadline": D}
	// (Notice).
	AnnotationPreemptionNotice = "lockstep.dev/preemption-notice"
	// AnnotationPreemptionNoticeSeconds on a job's pods is its
	// runPolicy.preemptionNoticeSeconds, for the scheduler to read off its
	// victims. The controller sets it; absent means no notice.
	AnnotationPreemptionNoticeSeconds = "lockstep.dev/preemption-notice-seconds"
	// MaxPreemptionNotice bounds the notice a job may ask for: the
	// preemptor's hold, closed to equal- and lower-priority work, covers
	// the wait.
	MaxPreemptionNotice = time.Hour
	// NoticeBySuspend is Notice.By when the job was suspended (by its spec
	// or by Kueue), not preempted by the scheduler.
	NoticeBySuspend = "suspend"
)

// Notice is the notice a victim's pods are given.
type Notice struct {
	// By is the preemptor ("namespace/podgroup") or NoticeBySuspend.
	By string `json:"by"`
	// Time is when the notice was given; a checkpoint reported at or
	// after it answers it.
	Time time.Time `json:"time"`
	// Deadline is when the pods are deleted if no report answers it.
	Deadline time.Time `json:"deadline"`
}

// Format is the notice's wire form, which ParseNotice reads back.
func (n Notice) Format() string {
	out, _ := json.Marshal(struct {
		By       string `json:"by"`
		Time     string `json:"time"`
		Deadline string `json:"deadline"`
	}{n.By, n.Time.UTC().Format(time.RFC3339Nano), n.Deadline.UTC().Format(time.RFC3339Nano)})
	return string(out)
}

// ParseNotice reads AnnotationPreemptionNotice's value. Only the scheduler
// and the controller write it; a notice that does not parse is not one.
func ParseNotice(s string) (Notice, error) {
	var n Notice
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return Notice{}, fmt.Errorf(`not a JSON object {"by": B, "time": T, "deadline": D}: %w`, err)
	}
	switch {
	case n.By == "":
		return Notice{}, errors.New("by: required")
	case n.Time.IsZero():
		return Notice{}, errors.New("time: required")
	case n.Deadline.Before(n.Time):
		return Notice{}, errors.New("deadline: before time")
	}
	return n, nil
}

// AnsweredBy reports whether c, a checkpoint report, answers the notice:
// it was complete at or after the notice was given. The rank's clock is
// trusted within CheckpointClockSkew, as everywhere else.
func (n Notice) AnsweredBy(c Checkpoint) bool {
	return !c.Time.Before(n.Time)
}

// NoticeOf reads the notice a pod's job asked for from its annotations
// (AnnotationPreemptionNoticeSeconds): 0 when it asked for none or the
// value is not a whole number of seconds within MaxPreemptionNotice.
func NoticeOf(annotations map[string]string) time.Duration {
	s, err := strconv.ParseInt(annotations[AnnotationPreemptionNoticeSeconds], 10, 32)
	if err != nil || s <= 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, MaxPreemptionNotice)
}

// NoticeOn reads the notice a pod was given, if any.
func NoticeOn(annotations map[string]string) (Notice, bool) {
	raw, ok := annotations[AnnotationPreemptionNotice]
	if !ok {
		return Notice{}, false
	}
	n, err := ParseNotice(raw)
	return n, err == nil
}

// Answered reports whether a pod's annotations hold a checkpoint report
// that answers n and that now believes (Checkpoint.Believable).
func (n Notice) Answered(annotations map[string]string, now time.Time) bool {
	raw, ok := annotations[AnnotationCheckpoint]
	if !ok {
		return false
	}
	c, err := ParseCheckpoint(raw)
	return err == nil && c.Believable(now) && n.AnsweredBy(c)
}
