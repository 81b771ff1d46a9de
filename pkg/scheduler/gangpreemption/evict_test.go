package gangpreemption

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

func victim(name string, grace *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{NodeName: "n", TerminationGracePeriodSeconds: grace},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}
}

// TestEvict: each victim is marked, then deleted, both fenced by its UID;
// a victim gone already, or whose mark the API server refuses, is not
// waited for, and only the refusal counts as a failure. A victim whose mark
// failed is never deleted: without the condition its controller would
// count the restart as the job's own failure.
func TestEvict(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	running, gone, refused := victim("running", nil), victim("gone", nil), victim("refused", nil)
	cs := clientsetfake.NewClientset(running, refused)
	cs.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetName() == "refused" {
			return true, nil, apierrors.NewInternalError(context.DeadlineExceeded)
		}
		return false, nil, nil
	})
	var mu sync.Mutex
	notGoing, failures := []string{}, 0
	e := &Evictor{
		Client: cs, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(time.Now()),
		NotGoing: func(_ context.Context, pod *v1.Pod) {
			mu.Lock()
			defer mu.Unlock()
			notGoing = append(notGoing, pod.Name)
		},
		Failed: func() { mu.Lock(); defer mu.Unlock(); failures++ },
	}
	var victims []Victim
	for _, pod := range []*v1.Pod{running, gone, refused} {
		victims = append(victims, Victim{Work: placement.Victim{Key: "ns/" + pod.Name}, Pods: []*v1.Pod{pod}})
	}
	e.Evict(logger, victim("preemptor", nil), victims, lockstep.Preemption{Preemptor: "ns/preemptor", Priority: 10})
	// Evict returns at once; the writes go on off the scheduling thread.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		_, err := cs.CoreV1().Pods("ns").Get(context.Background(), "running", metav1.GetOptions{})
		return len(notGoing) == 2 && apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("evictions did not finish: not going %v", notGoing)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"gone", "refused"}, slices.Sorted(slices.Values(notGoing))); diff != "" {
		t.Errorf("victims not waited for (-want,+got):\n%s", diff)
	}
	if failures != 1 {
		t.Errorf("failures counted = %d, want 1 (the refused mark; a victim gone is no failure)", failures)
	}
	writes := map[string][]string{}
	for _, a := range cs.Actions() {
		switch a := a.(type) {
		case clienttesting.DeleteActionImpl:
			writes[a.GetName()] = append(writes[a.GetName()], "delete "+string(ptr.Deref(ptr.Deref(a.DeleteOptions.Preconditions, metav1.Preconditions{}).UID, "")))
		case clienttesting.PatchActionImpl:
			writes[a.GetName()] = append(writes[a.GetName()], "patch")
		}
	}
	want := map[string][]string{
		"running": {"patch", "delete uid-running"},
		"gone":    {"patch"},
		"refused": {"patch"},
	}
	if diff := cmp.Diff(want, writes); diff != "" {
		t.Errorf("writes (-want,+got):\n%s", diff)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(context.Background(), "refused", metav1.GetOptions{}); err != nil {
		t.Errorf("the victim whose mark was refused: %v; want it left running", err)
	}
}

// noticed is a victim pod whose job asked for notice seconds.
func noticed(name string, seconds string) *v1.Pod {
	p := victim(name, nil)
	p.Annotations = map[string]string{lockstep.AnnotationPreemptionNoticeSeconds: seconds}
	return p
}

// TestEvictWithNotice: a victim whose job asked for notice is marked
// (condition and annotation) and deleted only when a rank reports a
// checkpoint that answers the notice, or the notice runs out; the work it
// lost is measured then, the time spent answering included. A notice
// taken over from an earlier scheduler keeps its deadline.
func TestEvictWithNotice(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	a0, a1, b, c := noticed("a-0", "60"), noticed("a-1", "60"), noticed("b", "30"), noticed("c", "60")
	cs := clientsetfake.NewClientset(a0, a1, b, c)
	var mu sync.Mutex
	var lost []float64
	e := &Evictor{
		Client: cs, Recorder: refRecorder{t: t, EventRecorder: events.NewFakeRecorder(10)}, Clock: clock,
		NotGoing: func(context.Context, *v1.Pod) {},
		Failed:   func() { t.Error("an eviction failed") },
		Lost:     func(s float64) { mu.Lock(); defer mu.Unlock(); lost = append(lost, s) },
	}
	gpus := []placement.VictimPod{{GPUs: topology.NewGPUSet(0, 1, 2, 3)}, {GPUs: topology.NewGPUSet(0, 1, 2, 3)}}
	by := lockstep.Preemption{Preemptor: "ns/high", Priority: 100}
	e.Evict(logger, victim("preemptor", nil), []Victim{
		{Work: placement.Victim{Key: "ns/a", Started: start.Add(-2 * time.Hour), Pods: gpus}, Pods: []*v1.Pod{a0, a1}},
		{Work: placement.Victim{Key: "ns/b", Started: start.Add(-time.Hour), Checkpointed: start.Add(-5 * time.Minute), Pods: gpus[:1]}, Pods: []*v1.Pod{b}},
	}, by)
	get := func(name string) (*v1.Pod, bool) {
		pod, err := cs.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
		return pod, err == nil
	}
	until := func(what string, done func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			return done(), nil
		}); err != nil {
			t.Fatalf("waiting for %s", what)
		}
	}
	given := func(name string) (lockstep.Notice, bool) {
		pod, ok := get(name)
		if !ok {
			return lockstep.Notice{}, false
		}
		n, ok := lockstep.NoticeOn(pod.Annotations)
		_, marked := preemptedBy(pod)
		return n, ok && marked
	}
	until("every pod to be given notice", func() bool {
		_, a0ok := given("a-0")
		_, a1ok := given("a-1")
		_, bok := given("b")
		return a0ok && a1ok && bok
	})
	n, _ := given("a-0")
	if diff := cmp.Diff(lockstep.Notice{By: "ns/high", Time: start, Deadline: start.Add(time.Minute)}, n); diff != "" {
		t.Errorf("notice (-want,+got):\n%s", diff)
	}

	// A report from before the notice does not answer it.
	clock.Step(10 * time.Second)
	pod, _ := get("a-1")
	pod.Annotations[lockstep.AnnotationCheckpoint] = lockstep.Checkpoint{Step: 7, Time: start.Add(-time.Second), Location: "s3://b/7"}.Format()
	e.Heard(pod, false)
	if _, ok := get("a-1"); !ok {
		t.Fatal("evicted on a report older than the notice")
	}
	// One rank's fresh report answers for the victim: both pods go at once.
	pod.Annotations[lockstep.AnnotationCheckpoint] = lockstep.Checkpoint{Step: 8, Time: start.Add(10 * time.Second), Location: "s3://b/8"}.Format()
	e.Heard(pod, false)
	until("the answered victim's pods to be deleted", func() bool {
		_, a0ok := get("a-0")
		_, a1ok := get("a-1")
		return !a0ok && !a1ok
	})
	if _, ok := get("b"); !ok {
		t.Fatal("a victim that has not answered was evicted before its notice ran out")
	}
	// b never answers: it goes when its 30 s run out.
	clock.Step(19 * time.Second)
	if _, ok := get("b"); !ok {
		t.Fatal("evicted before the notice ran out")
	}
	clock.Step(time.Second)
	until("the silent victim to be deleted at its deadline", func() bool { _, ok := get("b"); return !ok })

	// A notice a scheduler before this one gave, run out while none
	// listened: evicted at once.
	resumed := lockstep.Notice{By: "ns/high", Time: clock.Now().Add(-2 * time.Minute), Deadline: clock.Now().Add(-time.Minute)}
	e.Resume(logger, Victim{Work: placement.Victim{Key: "ns/c", Started: resumed.Time, Pods: gpus[:1]}, Pods: []*v1.Pod{c}}, resumed, by)
	until("the taken-over victim to be deleted", func() bool { _, ok := get("c"); return !ok })

	mu.Lock()
	defer mu.Unlock()
	// a: 8 GPUs x the 10 s it spent answering; b: 4 GPUs x the 5 min
	// before its notice and the 30 s of it; c: 4 GPUs x 2 min.
	if diff := cmp.Diff([]float64{80, 4 * 330, 4 * 120}, lost); diff != "" {
		t.Errorf("GPU-seconds lost (-want,+got):\n%s", diff)
	}
}

// refRecorder fails the test on an event whose related object is a nil
// pointer, which the real recorder dereferences (it panics taking its
// reference).
type refRecorder struct {
	t *testing.T
	events.EventRecorder
}

func (r refRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if related != nil && reflect.ValueOf(related).IsNil() {
		r.t.Errorf("event %s on %v names a nil related object", reason, regarding)
	}
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// preemptedBy reads the preemption condition off pod.
func preemptedBy(pod *v1.Pod) (lockstep.Preemption, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Reason == v1.PodReasonPreemptionByScheduler {
			return lockstep.ParsePreemption(c.Message)
		}
	}
	return lockstep.Preemption{}, false
}

func TestLongestGrace(t *testing.T) {
	tests := []struct {
		name string
		pods []*v1.Pod
		want time.Duration
	}{
		{name: "no victims"},
		{name: "the default grace period", pods: []*v1.Pod{victim("a", nil)}, want: 30 * time.Second},
		{name: "the longest wins", pods: []*v1.Pod{victim("a", ptr.To[int64](5)), victim("b", ptr.To[int64](600)), victim("c", nil)}, want: 10 * time.Minute},
		{name: "zero is zero", pods: []*v1.Pod{victim("a", ptr.To[int64](0))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, LongestGrace(tc.pods)); diff != "" {
				t.Errorf("LongestGrace (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestLanded: a pod lands when it is scheduled; a pod bound at creation
// (a DaemonSet's) when it is created.
func TestLanded(t *testing.T) {
	created, scheduled := time.Unix(1000, 0), time.Unix(2000, 0)
	pod := func(conds ...v1.PodCondition) *v1.Pod {
		p := victim("p", nil)
		p.CreationTimestamp = metav1.NewTime(created)
		p.Status.Conditions = conds
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want time.Time
	}{
		{"bound at creation", pod(), created},
		{"scheduled later", pod(v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduled)}), scheduled},
		{"not scheduled yet", pod(v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(scheduled)}), created},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := landed(tc.pod); !got.Equal(tc.want) {
				t.Errorf("landed = %v, want %v", got, tc.want)
			}
		})
	}
}
