package coscheduling

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

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

// TestCountLateBindings: a member the informer first saw pending and then
// saw bound by another scheduler counts as assigned, as one it first saw
// bound does; without countLateBindings the manager counts only the latter.
func TestCountLateBindings(t *testing.T) {
	for _, count := range []bool{true, false} {
		clientset := clientsetfake.NewClientset(
			utiltesting.MakePod("early-0", "ns").PodGroup("g").Obj(),
			onNode(utiltesting.MakePod("bound-0", "ns").PodGroup("g").Obj(), "n0"),
		)
		factory := informers.NewSharedInformerFactory(clientset, 0)
		pods := factory.Core().V1().Pods()
		mgr := core.NewPodGroupManager(newPodGroupClient(t, utiltesting.MakePodGroup("g", "ns", 2).Obj()), nil, new(time.Duration), pods)
		if count {
			if err := countLateBindings(mgr, pods.Informer()); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		factory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
			t.Fatal("pod informer did not sync")
		}
		late := utiltesting.MakePod("early-0", "ns").PodGroup("g").Obj()
		late.Spec.NodeName = "n1"
		if _, err := clientset.CoreV1().Pods("ns").Update(ctx, late, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := 1
		if count {
			want = 2
		}
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			seen, err := pods.Lister().Pods("ns").Get("early-0")
			return err == nil && seen.Spec.NodeName != "" && mgr.GetAssignedPodCount("ns/g") == want, nil
		})
		if err != nil {
			t.Errorf("countLateBindings %v: %v; assigned %d, want %d", count, err, mgr.GetAssignedPodCount("ns/g"), want)
		}
		cancel()
	}
}

// TestTerminatingMembersStopCounting: a bound member that is being deleted
// (say on a node that went dark, where it may stay Terminating for good)
// no longer counts as assigned, nor as a sibling at PreFilter, so the
// gang's next incarnation, with other pod names, reaches minMember only
// with pods that will run.
func TestTerminatingMembersStopCounting(t *testing.T) {
	clientset := clientsetfake.NewClientset(
		onNode(utiltesting.MakePod("old-0", "ns").PodGroup("g").Obj(), "n0"),
		onNode(utiltesting.MakePod("old-1", "ns").PodGroup("g").Obj(), "n1"),
	)
	factory := informers.NewSharedInformerFactory(clientset, 0)
	pods := factory.Core().V1().Pods()
	mgr := core.NewPodGroupManager(newPodGroupClient(t, utiltesting.MakePodGroup("g", "ns", 2).Obj()), nil, new(time.Duration), pods)
	if err := countLateBindings(mgr, pods.Informer()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	if got := mgr.GetAssignedPodCount("ns/g"); got != 2 {
		t.Fatalf("assigned %d before the delete, want 2", got)
	}
	dying := onNode(utiltesting.MakePod("old-1", "ns").PodGroup("g").Obj(), "n1")
	dying.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := clientset.CoreV1().Pods("ns").Update(ctx, dying, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		seen, err := pods.Lister().Pods("ns").Get("old-1")
		return err == nil && seen.DeletionTimestamp != nil && mgr.GetAssignedPodCount("ns/g") == 1, nil
	})
	if err != nil {
		t.Errorf("a Terminating member still counts: assigned %d, want 1", mgr.GetAssignedPodCount("ns/g"))
	}
	live, err := liveMembers(pods, "ns", "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].Name != "old-0" {
		t.Errorf("live members %v, want only old-0", live)
	}
}
