package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestSinglePodPreemptsGangAware: seven low-priority 4 x 8-GPU gangs, each
// started after the one before, and four low-priority 8-GPU pods outside
// gangs fill the cluster. A high-priority 8-GPU pod outside gangs evicts
// one of the single pods, which suffices, and no gang member. With the
// single pods gone (what is left of them raised out of reach), a
// high-priority 1-GPU pod finds no pod outside gangs to evict: it evicts
// the youngest gang (the least work lost) whole, never one lone member,
// and runs on a node that gang freed.
func TestSinglePodPreemptsGangAware(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	lowPod := func(name, group string) *corev1.Pod {
		b := utiltesting.MakePod(name, ns).GPUs(8).SchedulerName(localcluster.SchedulerName)
		if group != "" {
			b = b.PodGroup(group)
		}
		pod := b.Obj()
		pod.Spec.PriorityClassName = low
		// Victims take their whole grace period to go (the harness's
		// pod-deleted stage): short, to keep the test short.
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
		return pod
	}
	var youngest []*corev1.Pod
	for i := range 7 {
		name := fmt.Sprintf("gang-%d", i)
		pg := utiltesting.MakePodGroup(name, ns, 4).Obj()
		pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: lockstep.LevelLeaf, lockstep.AnnotationTopologyMode: string(lockstep.Required)}
		if err := cluster.Client.Create(ctx, pg); err != nil {
			t.Fatal(err)
		}
		youngest = nil
		for m := range 4 {
			youngest = append(youngest, lowPod(fmt.Sprintf("%s-%d", name, m), name))
		}
		cluster.CreatePods(t, youngest...)
		running := map[string]corev1.Pod{}
		for _, p := range waitGangBound(t, ns, name, 4, 2*time.Minute) {
			running[p.Name] = p
		}
		waitPastStart(t, running)
	}
	for i := range 4 {
		cluster.CreatePods(t, lowPod(fmt.Sprintf("solo-%d", i), ""))
	}
	waitRunningAllocated(t, ns, 32)
	before := livePods(t, ns)

	urgent := utiltesting.MakePod("urgent", ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
	urgent.Spec.PriorityClassName = high
	cluster.CreatePods(t, urgent)
	waitBound(t, ns, "urgent")
	gone := goneSince(t, ns, before)
	if len(gone) != 1 || !strings.HasPrefix(gone[0], "solo-") {
		t.Fatalf("the 8-GPU pod evicted %v, want exactly one solo pod", gone)
	}
	// Upstream's DefaultPreemption chose it: its event names the
	// preemptor by UID.
	uid := podUID(t, ns, "urgent")
	err := localcluster.Poll(ctx, 200*time.Millisecond, 30*time.Second, "a Preempted event on "+gone[0]+" naming urgent", func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "Pod", gone[0])
		return err == nil && slices.ContainsFunc(events, func(e corev1.Event) bool {
			return e.Reason == "Preempted" && strings.Contains(e.Message, uid)
		}), nil
	})
	if err != nil {
		t.Error(err)
	}

	// No single pod is left to evict: the rest of them go, and a 1-GPU
	// pod needs room only a whole gang can make.
	for i := range 4 {
		name := fmt.Sprintf("solo-%d", i)
		if name == gone[0] {
			continue
		}
		if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, name, deleteNow); err != nil {
			t.Fatal(err)
		}
	}
	filler := utiltesting.MakePod("filler", ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
	filler.Spec.PriorityClassName = high
	more := []*corev1.Pod{filler}
	for i := range 2 {
		p := filler.DeepCopy()
		p.Name = fmt.Sprintf("filler-%d", i)
		more = append(more, p)
	}
	cluster.CreatePods(t, more...)
	for _, p := range more {
		waitBound(t, ns, p.Name)
	}
	before = livePods(t, ns)
	small := utiltesting.MakePod("small", ns).GPUs(1).SchedulerName(localcluster.SchedulerName).Obj()
	small.Spec.PriorityClassName = high
	cluster.CreatePods(t, small)
	node := waitBound(t, ns, "small")
	gone = goneSince(t, ns, before)
	var want []string
	for _, p := range youngest {
		want = append(want, p.Name)
	}
	if strings.Join(gone, ",") != strings.Join(want, ",") {
		t.Errorf("the 1-GPU pod evicted %v, want the youngest gang whole %v", gone, want)
	}
	freed := false
	for _, p := range youngest {
		freed = freed || before[p.Name].Spec.NodeName == node
	}
	if !freed {
		t.Errorf("small runs on %s, not on a node its victims freed", node)
	}
	for _, name := range gone {
		if by := victimEventPreemptors(t, ns, name); len(by) != 1 || by[0] != ns+"/small" {
			t.Errorf("victim %s preempted for %v, want %s/small", name, by, ns)
		}
	}
}

// deleteNow deletes at once, as a force delete does.
var deleteNow = metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}

// livePods returns the pods of ns not being deleted, by name.
func livePods(t *testing.T, ns string) map[string]corev1.Pod {
	t.Helper()
	pods, err := cluster.Pods(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p
		}
	}
	return out
}

// goneSince returns, sorted, the pods of before that are now gone, being
// deleted or replaced.
func goneSince(t *testing.T, ns string, before map[string]corev1.Pod) []string {
	t.Helper()
	now := livePods(t, ns)
	var gone []string
	for name, p := range before {
		if q, ok := now[name]; !ok || q.UID != p.UID {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	return gone
}
