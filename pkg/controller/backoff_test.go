package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func defaultBackoff(mutate ...func(*v1alpha1.RestartBackoff)) *v1alpha1.RestartBackoff {
	j := testJob("")
	for _, m := range mutate {
		m(j.Spec.RunPolicy.RestartBackoff)
	}
	return j.Spec.RunPolicy.RestartBackoff
}

func TestRestartDelay(t *testing.T) {
	cases := []struct {
		name        string
		policy      *v1alpha1.RestartBackoff
		consecutive []int32
		want        []time.Duration
	}{{
		name:        "defaults double from 10s to the 6m cap",
		policy:      defaultBackoff(),
		consecutive: []int32{1, 2, 3, 4, 5, 6, 7, 100, 1 << 30},
		want:        []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 320 * time.Second, 360 * time.Second, 360 * time.Second, 360 * time.Second},
	}, {
		name:        "initial equal to max stays flat",
		policy:      defaultBackoff(func(b *v1alpha1.RestartBackoff) { b.InitialSeconds, b.MaxSeconds = ptr.To[int32](1), ptr.To[int32](1) }),
		consecutive: []int32{1, 2, 30},
		want:        []time.Duration{time.Second, time.Second, time.Second},
	}, {
		name:        "the cap need not be a doubling of initial",
		policy:      defaultBackoff(func(b *v1alpha1.RestartBackoff) { b.InitialSeconds, b.MaxSeconds = ptr.To[int32](3), ptr.To[int32](10) }),
		consecutive: []int32{1, 2, 3},
		want:        []time.Duration{3 * time.Second, 6 * time.Second, 10 * time.Second},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []time.Duration
			for _, n := range tc.consecutive {
				got = append(got, restartDelay(tc.policy, n))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delays (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestNextRestartBackoff(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }
	since := func(d time.Duration) *time.Time { return ptr.To(t0.Add(d)) }
	cases := []struct {
		name         string
		prev         *v1alpha1.RestartBackoffStatus
		runningSince *time.Time
		want         *v1alpha1.RestartBackoffStatus
	}{{
		name: "first restart waits initialSeconds",
		want: &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 1, LastRestartTime: at(0), NextAttemptTime: at(10 * time.Second)},
	}, {
		name: "a gang that failed before it ran doubles the delay",
		prev: &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 2, LastRestartTime: at(-time.Minute)},
		want: &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 3, LastRestartTime: at(0), NextAttemptTime: at(40 * time.Second)},
	}, {
		name:         "running for less than resetAfterSeconds still doubles",
		prev:         &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 1},
		runningSince: since(-599 * time.Second),
		want:         &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 2, LastRestartTime: at(0), NextAttemptTime: at(20 * time.Second)},
	}, {
		name:         "running for resetAfterSeconds starts over",
		prev:         &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 5},
		runningSince: since(-600 * time.Second),
		want:         &v1alpha1.RestartBackoffStatus{ConsecutiveRestarts: 1, LastRestartTime: at(0), NextAttemptTime: at(10 * time.Second)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := nextRestartBackoff(defaultBackoff(), tc.prev, tc.runningSince, t0)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("backoff (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestCrashLoopRestartBudget holds the bound the backoff exists for: a rank
// that fails a second after every start costs at most 4 gang restarts in
// 90 s with the default policy.
func TestCrashLoopRestartBudget(t *testing.T) {
	p := defaultBackoff()
	var st *v1alpha1.RestartBackoffStatus
	now, restarts := t0, 0
	for {
		st = nextRestartBackoff(p, st, nil, now)
		restarts++
		// The pods come back at the next attempt and fail a second later.
		now = st.NextAttemptTime.Add(time.Second)
		if now.Sub(t0) > 90*time.Second {
			break
		}
	}
	if restarts > 4 {
		t.Errorf("%d restarts in 90s of a crash loop, want at most 4", restarts)
	}
}

func TestBackoffWait(t *testing.T) {
	st := &v1alpha1.TrainingJobStatus{}
	if w := backoffWait(st, t0); w != 0 {
		t.Errorf("no restart: wait %s, want 0", w)
	}
	st.RestartBackoff = nextRestartBackoff(defaultBackoff(), nil, nil, t0)
	if w := backoffWait(st, t0.Add(4*time.Second)); w != 6*time.Second {
		t.Errorf("4s after a restart: wait %s, want 6s", w)
	}
	if w := backoffWait(st, t0.Add(time.Minute)); w != 0 {
		t.Errorf("past the next attempt: wait %s, want 0", w)
	}
	st.RestartBackoff.NextAttemptTime = nil
	if w := backoffWait(st, t0); w != 0 {
		t.Errorf("pods created: wait %s, want 0", w)
	}
}
