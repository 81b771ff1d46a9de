package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestModelNodesReadyWithGPUs checks every node of the model is Ready with the
// allocatable GPUs, profile and topology labels the model gives it.
func TestModelNodesReadyWithGPUs(t *testing.T) {
	ctx := context.Background()
	list, err := cluster.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*corev1.Node{}
	for i := range list.Items {
		got[list.Items[i].Name] = &list.Items[i]
	}
	for _, want := range cluster.Model.Nodes() {
		node, ok := got[want.Name]
		if !ok {
			t.Errorf("node %s missing", want.Name)
			continue
		}
		if !localcluster.NodeSchedulable(node) {
			t.Errorf("node %s is not Ready: %+v", node.Name, node.Status.Conditions)
		}
		profile, _ := topology.LookupProfile(want.Labels[lockstep.LabelProfile])
		gpus := node.Status.Allocatable[lockstep.GPUResource]
		if gpus.Value() != int64(profile.GPUCount) {
			t.Errorf("node %s: allocatable %s = %s, want %d", node.Name, lockstep.GPUResource, gpus.String(), profile.GPUCount)
		}
		for _, level := range cluster.Model.Levels {
			if node.Labels[level.NodeLabel] != want.Labels[level.NodeLabel] {
				t.Errorf("node %s: label %s = %q, want %q", node.Name, level.NodeLabel, node.Labels[level.NodeLabel], want.Labels[level.NodeLabel])
			}
		}
	}
}

// TestSchedulerBindsGPUPod checks a pod that names lockstep-scheduler is bound
// by our scheduler process and then run by KWOK.
func TestSchedulerBindsGPUPod(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	pod := utiltesting.MakePod("trainer", ns).GPUs(2).SchedulerName(localcluster.SchedulerName).Obj()
	cluster.CreatePods(t, pod)

	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "pod running", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitEvent(ns, "Pod", pod.Name, "Scheduled", localcluster.SchedulerName); err != nil {
		t.Error(err)
	}
}

// TestGangBoundAllOrNothing checks Coscheduling holds back a PodGroup until
// minMember pods exist, then binds all of them.
func TestGangBoundAllOrNothing(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	const members = 4
	if err := cluster.Client.Create(ctx, utiltesting.MakePodGroup("gang", ns, members).Obj()); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, members)
	for i := range pods {
		pods[i] = utiltesting.MakePod(fmt.Sprintf("gang-%d", i), ns).GPUs(8).
			SchedulerName(localcluster.SchedulerName).PodGroup("gang").Obj()
	}

	// Three of four: each is attempted and rejected, none bound.
	cluster.CreatePods(t, pods[:members-1]...)
	for _, p := range pods[:members-1] {
		waitForEvent(t, ns, p.Name, "FailedScheduling")
	}
	assertNoneBound(t, ns)

	// The fourth completes the gang: all four are bound.
	cluster.CreatePods(t, pods[members-1])
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "all gang members bound", func(ctx context.Context) (bool, error) {
		all, err := cluster.Pods(ctx, ns)
		return err == nil && len(framework.BoundPods(all)) == members, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGangThatCannotFitBindsNothing checks a PodGroup needing more GPUs than
// the cluster has (40 pods x 8 GPUs on 32 nodes x 8) never gets a single pod
// bound: Coscheduling reserves members at Permit and releases them all when
// the gang cannot complete.
func TestGangThatCannotFitBindsNothing(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	totalGPUs := 0
	for _, n := range cluster.Model.Nodes() {
		q := n.Status.Allocatable[lockstep.GPUResource]
		totalGPUs += int(q.Value())
	}
	members := totalGPUs/8 + 8
	if err := cluster.Client.Create(ctx, utiltesting.MakePodGroup("too-big", ns, int32(members)).Obj()); err != nil {
		t.Fatal(err)
	}

	// Watch from before the first pod exists, so no binding can slip by.
	watcher, err := cluster.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	bound := make(chan string, 1)
	go func() {
		for ev := range watcher.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && p.Spec.NodeName != "" {
				select {
				case bound <- p.Name + " on " + p.Spec.NodeName:
				default:
				}
			}
		}
	}()

	pods := make([]*corev1.Pod, members)
	for i := range pods {
		pods[i] = utiltesting.MakePod(fmt.Sprintf("too-big-%02d", i), ns).GPUs(8).
			SchedulerName(localcluster.SchedulerName).PodGroup("too-big").Obj()
	}
	cluster.CreatePods(t, pods...)

	// Every member must have been tried and turned down at least once: by then
	// the scheduler has reserved what fits, found the gang incomplete and
	// released it. Then watch one more Permit timeout for a late bind.
	for _, p := range pods {
		waitForEvent(t, ns, p.Name, "FailedScheduling")
	}
	select {
	case b := <-bound:
		t.Fatalf("pod %s was bound although its gang cannot fit", b)
	case <-time.After(10 * time.Second):
	}
	assertNoneBound(t, ns)
}

func waitForEvent(t *testing.T, ns, pod, reason string) {
	t.Helper()
	if err := waitEvent(ns, "Pod", pod, reason, localcluster.SchedulerName); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits up to a minute for an event with reason (from source,
// when not "") on the named object. Events are sent after the write they
// report, by a broadcaster of their own, so one read right after seeing a
// pod bound or a condition set may come too early.
func waitEvent(ns, kind, name, reason, source string) error {
	var events []corev1.Event
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, reason+" event on "+kind+" "+name, func(ctx context.Context) (bool, error) {
		var err error
		events, err = cluster.Events(ctx, ns, kind, name)
		return err == nil && framework.HasEvent(events, reason, source), nil
	})
	if err != nil {
		return fmt.Errorf("%w; events: %v", err, eventSummaries(events))
	}
	return nil
}

func assertNoneBound(t *testing.T, ns string) {
	t.Helper()
	pods, err := cluster.Pods(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if bound := framework.BoundPods(pods); len(bound) > 0 {
		t.Fatalf("%d of %d pods bound, want none: first %s on %s", len(bound), len(pods), bound[0].Name, bound[0].Spec.NodeName)
	}
}

func eventSummaries(events []corev1.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s/%s: %s", e.ReportingController, e.Reason, e.Message)
	}
	return out
}
