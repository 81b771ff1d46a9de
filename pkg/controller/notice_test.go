package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TestSuspendNotice: a suspension gives the job's pods one notice, waits
// for it, and lets them go once a rank answers, a pod finishes or the
// notice runs out; a notice from before this suspension (a job resumed in
// time) is not this one's, and a job that asked for none gets none.
func TestSuspendNotice(t *testing.T) {
	suspendedAt := t0.Add(-time.Minute)
	own := func(at time.Time) string {
		return lockstep.Notice{By: lockstep.NoticeBySuspend, Time: at, Deadline: at.Add(2 * time.Minute)}.Format()
	}
	ranOut := lockstep.Notice{By: lockstep.NoticeBySuspend, Time: suspendedAt, Deadline: t0.Add(-time.Second)}.Format()
	answer := lockstep.Checkpoint{Step: 9, Time: t0, Location: "s3://b/9"}.Format()
	tests := []struct {
		name   string
		notice *int32
		pods   []*corev1.Pod
		// want is what is left to wait; given, the notice each pod then
		// carries ("" none).
		want  time.Duration
		given map[string]string
		// answered: the checkpoint that answered is written first.
		answered bool
	}{
		{name: "no notice asked: delete now", pods: []*corev1.Pod{noticePod("a", nil)}, given: map[string]string{"a": ""}},
		{
			name: "first look: every pod given the notice", notice: ptr.To[int32](120),
			pods: []*corev1.Pod{noticePod("a", nil), noticePod("b", nil)}, want: 2 * time.Minute,
			given: map[string]string{"a": own(t0), "b": own(t0)},
		},
		{
			name: "waiting: the earliest notice given counts, and a pod that missed it gets that one", notice: ptr.To[int32](120),
			pods: []*corev1.Pod{noticePod("a", map[string]string{lockstep.AnnotationPreemptionNotice: own(suspendedAt)}), noticePod("b", nil)},
			want: time.Minute, given: map[string]string{"a": own(suspendedAt), "b": own(suspendedAt)},
		},
		{
			name: "answered: delete now", notice: ptr.To[int32](120),
			pods:  []*corev1.Pod{noticePod("a", map[string]string{lockstep.AnnotationPreemptionNotice: own(suspendedAt), lockstep.AnnotationCheckpoint: answer})},
			given: map[string]string{"a": own(suspendedAt)}, answered: true,
		},
		{
			name: "a report from before the notice is no answer", notice: ptr.To[int32](120),
			pods: []*corev1.Pod{noticePod("a", map[string]string{
				lockstep.AnnotationPreemptionNotice: own(suspendedAt),
				lockstep.AnnotationCheckpoint:       lockstep.Checkpoint{Step: 1, Time: suspendedAt.Add(-time.Second), Location: "s3://b/1"}.Format(),
			})},
			want: time.Minute, given: map[string]string{"a": own(suspendedAt)},
		},
		{
			name: "run out: delete now", notice: ptr.To[int32](120),
			pods:  []*corev1.Pod{noticePod("a", map[string]string{lockstep.AnnotationPreemptionNotice: ranOut})},
			given: map[string]string{"a": ranOut},
		},
		{
			name: "a notice from before this suspension is not this one's", notice: ptr.To[int32](120),
			pods: []*corev1.Pod{noticePod("a", map[string]string{lockstep.AnnotationPreemptionNotice: own(t0.Add(-time.Hour))})},
			want: 2 * time.Minute, given: map[string]string{"a": own(t0)},
		},
		{
			name: "a pod finished: delete now", notice: ptr.To[int32](120),
			pods: []*corev1.Pod{noticePod("a", nil), func() *corev1.Pod {
				p := noticePod("b", nil)
				p.Status.Phase = corev1.PodFailed
				return p
			}()},
			given: map[string]string{"a": "", "b": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(v1alpha1.RestartOnFailure, func(j *v1alpha1.TrainingJob) {
				j.Spec.RunPolicy = &v1alpha1.RunPolicy{Suspend: ptr.To(true), PreemptionNoticeSeconds: tc.notice}
				j.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.JobSuspended), Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(suspendedAt)}}
			})
			objs := []client.Object{job.DeepCopy()}
			for _, p := range tc.pods {
				objs = append(objs, p.DeepCopy())
			}
			c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(objs...).Build()
			r := fakeReconciler(c)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
				t.Fatal(err)
			}
			// As folded before any decision.
			folded := &v1alpha1.CheckpointStatus{Step: 9, Time: metav1.NewTime(t0), Location: "s3://b/9", Pod: "a"}
			job.Status.Checkpoint = folded
			left, err := r.suspendNotice(context.Background(), job, tc.pods)
			if err != nil {
				t.Fatal(err)
			}
			if left != tc.want {
				t.Errorf("left to wait %s, want %s", left, tc.want)
			}
			got := map[string]string{}
			for _, p := range tc.pods {
				var now corev1.Pod
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &now); err != nil {
					t.Fatal(err)
				}
				got[p.Name] = now.Annotations[lockstep.AnnotationPreemptionNotice]
			}
			if diff := cmp.Diff(tc.given, got); diff != "" {
				t.Errorf("notices on the pods (-want,+got):\n%s", diff)
			}
			var stored v1alpha1.TrainingJob
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), &stored); err != nil {
				t.Fatal(err)
			}
			if written := stored.Status.Checkpoint != nil; written != tc.answered {
				t.Errorf("status.checkpoint written before the pods go: %v, want %v", written, tc.answered)
			}
		})
	}
}

// TestClearSuspendNotices: a job resumed before its pods went has the
// suspension's notice taken off them; a scheduler's notice stays.
func TestClearSuspendNotices(t *testing.T) {
	suspend := lockstep.Notice{By: lockstep.NoticeBySuspend, Time: t0, Deadline: t0.Add(time.Minute)}.Format()
	preempt := lockstep.Notice{By: "ns/urgent", Time: t0, Deadline: t0.Add(time.Minute)}.Format()
	a := noticePod("a", map[string]string{lockstep.AnnotationPreemptionNotice: suspend})
	b := noticePod("b", map[string]string{lockstep.AnnotationPreemptionNotice: preempt})
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(a.DeepCopy(), b.DeepCopy()).Build()
	if err := fakeReconciler(c).clearSuspendNotices(context.Background(), []*corev1.Pod{a, b}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range []*corev1.Pod{a, b} {
		var now corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &now); err != nil {
			t.Fatal(err)
		}
		got[p.Name] = now.Annotations[lockstep.AnnotationPreemptionNotice]
	}
	if diff := cmp.Diff(map[string]string{"a": "", "b": preempt}, got); diff != "" {
		t.Errorf("notices (-want,+got):\n%s", diff)
	}
}

func noticePod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}
