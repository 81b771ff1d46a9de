package controller

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// A PodGroup left Failed or Finished is re-armed only under a gang that,
// by upstream's own rules, has neither failed nor finished, and only once
// nothing stale or terminating is left that upstream would count again.
func TestPodGroupNeedsRearm(t *testing.T) {
	gang := func(phases ...corev1.PodPhase) observation {
		obs := observation{live: map[string]jobPod{}}
		for i, ph := range phases {
			name := fmt.Sprintf("p-%d", i)
			obs.live[name] = jobPod{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: ph}}}
		}
		return obs
	}
	running := gang(corev1.PodRunning, corev1.PodRunning, corev1.PodRunning, corev1.PodRunning)
	withStale := running
	withStale.stale = []jobPod{{Pod: &corev1.Pod{}}}
	withTerminating := running
	withTerminating.terminating = 1
	tests := []struct {
		name  string
		phase schedv1alpha1.PodGroupPhase
		obs   observation
		want  bool
	}{
		{name: "Failed under a running gang", phase: schedv1alpha1.PodGroupFailed, obs: running, want: true},
		{name: "Finished under a running gang", phase: schedv1alpha1.PodGroupFinished, obs: running, want: true},
		{name: "Failed before the new gang is created", phase: schedv1alpha1.PodGroupFailed, obs: gang(), want: true},
		{name: "Failed under a pending gang", phase: schedv1alpha1.PodGroupFailed, obs: gang(corev1.PodPending, corev1.PodPending, corev1.PodRunning, corev1.PodRunning), want: true},
		{name: "Running", phase: schedv1alpha1.PodGroupRunning, obs: running},
		{name: "Pending", phase: schedv1alpha1.PodGroupPending, obs: gang()},
		{name: "a member failed", phase: schedv1alpha1.PodGroupFailed, obs: gang(corev1.PodRunning, corev1.PodFailed, corev1.PodRunning, corev1.PodRunning)},
		{name: "the gang succeeded", phase: schedv1alpha1.PodGroupFinished, obs: gang(corev1.PodSucceeded, corev1.PodSucceeded, corev1.PodSucceeded, corev1.PodSucceeded)},
		{name: "some members succeeded", phase: schedv1alpha1.PodGroupFinished, obs: gang(corev1.PodSucceeded, corev1.PodSucceeded, corev1.PodRunning, corev1.PodRunning), want: true},
		{name: "pods of the last incarnation left", phase: schedv1alpha1.PodGroupFailed, obs: withStale},
		{name: "a member terminating", phase: schedv1alpha1.PodGroupFailed, obs: withTerminating},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := podGroupNeedsRearm(schedv1alpha1.PodGroupStatus{Phase: tc.phase}, 4, tc.obs); got != tc.want {
				t.Errorf("podGroupNeedsRearm(%s) = %v, want %v", tc.phase, got, tc.want)
			}
		})
	}
}

// Only a move into an ended phase wakes the job; upstream's other status
// writes do not.
func TestPodGroupEndedPredicate(t *testing.T) {
	pg := func(phase schedv1alpha1.PodGroupPhase, running int32) *schedv1alpha1.PodGroup {
		return &schedv1alpha1.PodGroup{Status: schedv1alpha1.PodGroupStatus{Phase: phase, Running: running}}
	}
	tests := []struct {
		name     string
		old, new *schedv1alpha1.PodGroup
		want     bool
	}{
		{name: "Running to Failed", old: pg(schedv1alpha1.PodGroupRunning, 4), new: pg(schedv1alpha1.PodGroupFailed, 3), want: true},
		{name: "Pending to Finished", old: pg(schedv1alpha1.PodGroupPending, 0), new: pg(schedv1alpha1.PodGroupFinished, 0), want: true},
		{name: "counts", old: pg(schedv1alpha1.PodGroupScheduling, 2), new: pg(schedv1alpha1.PodGroupScheduling, 3)},
		{name: "Scheduling to Running", old: pg(schedv1alpha1.PodGroupScheduling, 3), new: pg(schedv1alpha1.PodGroupRunning, 4)},
		{name: "Failed stays Failed", old: pg(schedv1alpha1.PodGroupFailed, 3), new: pg(schedv1alpha1.PodGroupFailed, 2)},
		{name: "re-armed", old: pg(schedv1alpha1.PodGroupFailed, 3), new: pg(schedv1alpha1.PodGroupPending, 0)},
	}
	for _, tc := range tests {
		if got := podGroupEndedPredicate.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passed %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A job's PodGroup is re-armed at most maxRearms times per incarnation;
// a restart starts the count over, and jobs count apart.
func TestRearmsBoundedPerIncarnation(t *testing.T) {
	var r rearms
	job := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{UID: "a"}}
	other := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{UID: "b"}}
	for i := range maxRearms {
		if !r.take(job) {
			t.Fatalf("re-arm %d of incarnation 0 refused, want %d allowed", i+1, maxRearms)
		}
	}
	if r.take(job) {
		t.Errorf("re-arm %d of incarnation 0 allowed, want at most %d", maxRearms+1, maxRearms)
	}
	if !r.take(other) {
		t.Error("another job's first re-arm refused")
	}
	job.Status.RestartCount = 1
	if !r.take(job) {
		t.Error("the first re-arm after a restart refused")
	}
	r.forget(job.UID)
	job.Status.RestartCount = 1
	for i := range maxRearms {
		if !r.take(job) {
			t.Fatalf("re-arm %d after forget refused", i+1)
		}
	}
}
