package gangpreemption

import (
	"context"
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
	"k8s.io/utils/ptr"
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
		Client: cs, Recorder: events.NewFakeRecorder(10),
		NotGoing: func(_ context.Context, pod *v1.Pod) {
			mu.Lock()
			defer mu.Unlock()
			notGoing = append(notGoing, pod.Name)
		},
		Failed: func() { mu.Lock(); defer mu.Unlock(); failures++ },
	}
	e.Evict(logger, victim("preemptor", nil), []*v1.Pod{running, gone, refused}, "preempted")
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
