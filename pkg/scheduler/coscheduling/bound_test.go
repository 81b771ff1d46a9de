package coscheduling

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	upstream "sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"
)

// TestPodGroupManagerField guards the reflection in podGroupManager against
// a scheduler-plugins upgrade that renames or retypes the field.
func TestPodGroupManagerField(t *testing.T) {
	f, ok := reflect.TypeFor[upstream.Coscheduling]().FieldByName("pgMgr")
	if !ok || f.Type != reflect.TypeFor[core.Manager]() {
		t.Fatalf("Coscheduling.pgMgr missing or not a core.Manager (%v): update podGroupManager", f.Type)
	}
	if _, err := podGroupManager(&upstream.Coscheduling{}); err == nil {
		t.Error("podGroupManager of a plugin without a manager: no error")
	}
}

func TestBecameBound(t *testing.T) {
	pending, bound := &corev1.Pod{}, &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
	for _, tc := range []struct {
		old, pod *corev1.Pod
		want     bool
	}{{pending, bound, true}, {pending, pending, false}, {bound, bound, false}} {
		if got := BecameBound(tc.old, tc.pod); got != tc.want {
			t.Errorf("BecameBound(%q → %q) = %v, want %v", tc.old.Spec.NodeName, tc.pod.Spec.NodeName, got, tc.want)
		}
	}
}
