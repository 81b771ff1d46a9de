package agent

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestNextRead(t *testing.T) {
	const interval = 10 * time.Second
	base := time.Unix(1_700_000_000, 0)
	for _, node := range []string{"a", "gpu-017", "rack3-node9"} {
		first := NextRead(node, base, interval)
		if !first.After(base) || first.Sub(base) > interval {
			t.Errorf("%s: first read after %v is %v, want within (0, %v]", node, base, first, interval)
		}
		// Every moment up to a read is served by that read; the read
		// itself is served by the next one.
		for _, at := range []time.Time{first.Add(-interval + time.Nanosecond), first.Add(-time.Second), first.Add(-time.Nanosecond)} {
			if got := NextRead(node, at, interval); !got.Equal(first) {
				t.Errorf("%s: NextRead(%v) = %v, want %v", node, at, got, first)
			}
		}
		if got := NextRead(node, first, interval); !got.Equal(first.Add(interval)) {
			t.Errorf("%s: NextRead at a read = %v, want the next read %v", node, got, first.Add(interval))
		}
	}
	if NextRead("a", base, interval).Equal(NextRead("gpu-017", base, interval)) && NextRead("a", base, interval).Equal(NextRead("rack3-node9", base, interval)) {
		t.Error("three nodes read at the same phase: phases do not spread")
	}
}

// TestFakeAgentReportsOnItsResyncInterval: a pod bound to a node, and its
// deletion, reach the NodeTopology at the node's next read, not at once;
// what changed in between is reported together at that read.
func TestFakeAgentReportsOnItsResyncInterval(t *testing.T) {
	const interval = 10 * time.Second
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0", UID: "uid-n0", Labels: map[string]string{lockstep.LabelProfile: "hgx-h100"}}}
	r := benchReconciler(t, node)
	r.ResyncInterval = interval
	c := r.Client
	clock := r.Publisher.Clock.(*clocktesting.FakePassiveClock)
	ctx := context.Background()
	reconcileNode := func() time.Duration {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: "n0"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.RequeueAfter
	}
	reported := func() []string {
		t.Helper()
		nt := &v1alpha1.NodeTopology{}
		if err := c.Get(ctx, client.ObjectKey{Name: "n0"}, nt); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range nt.Status.Allocations {
			out = append(out, a.Pod)
		}
		return out
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "n0", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("2")},
			}}}},
		}
	}

	// The first read publishes at once.
	reconcileNode()
	if got := reported(); len(got) != 0 {
		t.Fatalf("first publish reports %v, want no allocations", got)
	}
	// A pod is bound between reads: the report waits for the next read.
	clock.SetTime(NextRead("n0", clock.Now(), interval).Add(-7 * time.Second))
	due := NextRead("n0", clock.Now(), interval)
	if err := c.Create(ctx, pod("a")); err != nil {
		t.Fatal(err)
	}
	if wait := reconcileNode(); wait != due.Sub(clock.Now()) {
		t.Errorf("requeued after %v, want %v (the next read)", wait, due.Sub(clock.Now()))
	}
	if got := reported(); len(got) != 0 {
		t.Errorf("pod bound 3 s after a read reported at once: %v", got)
	}
	// A second pod lands before that read: reported together with the first.
	clock.SetTime(due.Add(-time.Second))
	if err := c.Create(ctx, pod("b")); err != nil {
		t.Fatal(err)
	}
	reconcileNode()
	if got := reported(); len(got) != 0 {
		t.Errorf("reported %v a second before the read", got)
	}
	clock.SetTime(due)
	reconcileNode()
	if diff := cmp.Diff([]string{"a", "b"}, reported()); diff != "" {
		t.Errorf("at the read (-want,+got):\n%s", diff)
	}
	// A pod gone keeps its GPUs in the report until the read after.
	clock.SetTime(due.Add(2 * time.Second))
	if err := c.Delete(ctx, pod("a")); err != nil {
		t.Fatal(err)
	}
	reconcileNode()
	if diff := cmp.Diff([]string{"a", "b"}, reported()); diff != "" {
		t.Errorf("right after the delete (-want,+got):\n%s", diff)
	}
	clock.SetTime(due.Add(interval))
	reconcileNode()
	if diff := cmp.Diff([]string{"b"}, reported()); diff != "" {
		t.Errorf("at the next read (-want,+got):\n%s", diff)
	}
}
