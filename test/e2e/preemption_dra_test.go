package e2e

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TestDRAGangPreemptsWholeDRAGang: on two DRA HGX nodes of one leaf, two
// low-priority DRA gangs of two 4-GPU members run, "old" started before
// "young". A high-priority DRA gang of two 4-GPU members finds no room: it
// displaces exactly one whole gang, the younger (less work lost), whose
// pods take their whole grace period to go; it runs once their claims are
// freed, on devices of its own pods' nodes given to no one else, and no
// claim stays allocated to a victim.
func TestDRAGangPreemptsWholeDRAGang(t *testing.T) {
	ctx := context.Background()
	dra := addDRANodes(t, "dra-p", 2, 2)
	ns := cluster.NewNamespace(t)
	low := draClass(priorityClass(t, ns, "low", lowPriority, false))
	high := draClass(priorityClass(t, ns, "high", highPriority, false))

	old, young := oldAndYoung(t, ns, low)
	youngClaims := claimsOf(t, ns, young)

	createDRAGangOf(t, ns, "urgent", 2, 4, high)
	waitPreempted(t, ns, podUIDs(young), ns+"/urgent", highPriority)
	urgent := waitGangBound(t, ns, "urgent", 2, 2*time.Minute)
	isDRA := map[string]bool{}
	for _, n := range dra {
		isDRA[n] = true
	}
	for _, pod := range urgent {
		if !isDRA[pod.Spec.NodeName] {
			t.Errorf("preemptor pod %s bound to %s, not a DRA node of %v", pod.Name, pod.Spec.NodeName, dra)
		}
	}
	checkGangUntouched(t, ns, "old", old)
	oldNow, err := gangPods(ctx, ns, "old")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[draDevice]string{}
	for pod, devices := range checkClaimsOnOwnNodes(t, ns, append(oldNow, urgent...), 4) {
		for _, d := range devices {
			if other, taken := seen[d]; taken {
				t.Errorf("device %s/%s given to %s and %s", d.pool, d.device, other, pod)
			}
			seen[d] = pod
		}
	}
	// The victims' claims, made from their template, are gone with them
	// (kube-controller-manager deletes them): none holds a device.
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the victims' claims deleted", func(ctx context.Context) (bool, error) {
		for _, name := range youngClaims {
			c := &resourcev1.ResourceClaim{}
			if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
	if n, err := allocatedClaims(ctx, ns); err != nil || n != 4 {
		t.Errorf("%d claims allocated (err %v), want the 4 of old and urgent", n, err)
	}
}

// waitDRAGangRunning waits until the gang's members pods run, and returns
// them by name.
func waitDRAGangRunning(t *testing.T, ns, gang string, members int) map[string]corev1.Pod {
	t.Helper()
	out := map[string]corev1.Pod{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, 2*time.Minute, "gang "+gang+" running", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, gang)
		if err != nil {
			return false, nil
		}
		clear(out)
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.Status.StartTime != nil {
				out[p.Name] = p
			}
		}
		return len(out) == members, nil
	})
	if err != nil {
		t.Fatalf("%v: %d of %d running", err, len(out), members)
	}
	return out
}

// claimsOf returns the names of the claims generated for pods.
func claimsOf(t *testing.T, ns string, pods map[string]corev1.Pod) []string {
	t.Helper()
	var names []string
	for name := range pods {
		waitClaimAllocated(t, ns, name, 30*time.Second)
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName != nil {
				names = append(names, *st.ResourceClaimName)
			}
		}
	}
	if len(names) != len(pods) {
		t.Fatalf("claims %v for %d pods, want one each", names, len(pods))
	}
	return names
}

// TestPendingMemberGangCostedByRunningWork: a gang with a member pending
// (more pods than its minMember, as an elastic job below its max or an HPA
// scale-up has) is costed by the work of its running members, not as a
// gang that never started. On two DRA nodes, "old" runs two 4-GPU members
// on one and has a third pending; "young", started later, fills the other.
// A high-priority gang takes young, the cheaper victim. Then, with
// preemptionMinRuntime set, a just-started "fresh" gang is protected and
// old, running past it with a pending member again, is evictable: it goes
// whole, its pending member with it, and the preemptor runs.
func TestPendingMemberGangCostedByRunningWork(t *testing.T) {
	ctx := context.Background()
	addDRANodes(t, "dra-m", 2, 2)
	ns := cluster.NewNamespace(t)
	low := draClass(priorityClass(t, ns, "low", lowPriority, false))
	high := draClass(priorityClass(t, ns, "high", highPriority, false))

	old, young := oldAndYoung(t, ns, low)
	createPendingMember(t, ns, "old", "old-2", low)

	createDRAGangOf(t, ns, "urgent", 2, 4, high)
	waitPreempted(t, ns, podUIDs(young), ns+"/urgent", highPriority)
	waitGangBound(t, ns, "urgent", 2, 2*time.Minute)
	checkGangUntouched(t, ns, "old", old)

	// The pending member would take the room the preemptor leaves.
	deletePod(t, ns, "old-2")
	const minRuntime = time.Minute
	restartSchedulerWithArgs(t, "scheduler-min-runtime", map[string]any{"preemptionMinRuntime": minRuntime.String()})
	deleteGang(t, ns, "urgent")
	createDRAGangOf(t, ns, "fresh", 2, 4, low)
	fresh := waitDRAGangRunning(t, ns, "fresh", 2)
	createPendingMember(t, ns, "old", "old-3", low)
	// Old is evictable once minRuntime has passed since both its members
	// ran; fresh, started less than minRuntime ago (it started more than
	// the first round's length after old), is protected.
	var started time.Time
	for _, p := range old {
		if p.Status.StartTime.After(started) {
			started = p.Status.StartTime.Time
		}
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, 2*minRuntime, "old past preemptionMinRuntime", func(context.Context) (bool, error) {
		return time.Since(started) > minRuntime+time.Second, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	victims := podUIDs(old)
	pending, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, "old-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victims["old-3"] = pending.UID
	createDRAGangOf(t, ns, "urgent2", 2, 4, high)
	waitPreempted(t, ns, victims, ns+"/urgent2", highPriority)
	waitGangBound(t, ns, "urgent2", 2, 2*time.Minute)
	checkGangUntouched(t, ns, "fresh", fresh)
}

// oldAndYoung runs two DRA gangs of two 4-GPU members in class (draClass),
// "old" and then "young", started a second apart or more (start times
// have second precision), and returns their pods by name.
func oldAndYoung(t *testing.T, ns string, class func(*corev1.Pod)) (old, young map[string]corev1.Pod) {
	t.Helper()
	createDRAGangOf(t, ns, "old", 2, 4, class)
	old = waitDRAGangRunning(t, ns, "old", 2)
	waitPastStart(t, old)
	createDRAGangOf(t, ns, "young", 2, 4, class)
	return old, waitDRAGangRunning(t, ns, "young", 2)
}

// draClass has a DRA gang's pods run in PriorityClass class and take 10 s
// to go once deleted, as trainers that checkpoint on SIGTERM do.
func draClass(class string) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		pod.Spec.PriorityClassName = class
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	}
}

// createPendingMember adds pod name to createDRAGang's gang and waits
// until the scheduler turned it away: there is no room for it.
func createPendingMember(t *testing.T, ns, gang, name string, change func(*corev1.Pod)) {
	t.Helper()
	pod := draMember(ns, gang, name)
	change(pod)
	cluster.CreatePods(t, pod)
	waitPodsUnschedulable(t, name, func(ctx context.Context) ([]corev1.Pod, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []corev1.Pod{*p}, nil
	})
}

// checkGangUntouched fails the test if a pod of want (by name) is gone,
// replaced or being deleted.
func checkGangUntouched(t *testing.T, ns, gang string, want map[string]corev1.Pod) {
	t.Helper()
	pods, err := gangPods(context.Background(), ns, gang)
	if err != nil {
		t.Fatal(err)
	}
	checkPodsUntouched(t, "gang "+gang, pods, podUIDs(want))
}

// deletePod deletes pod name of ns at once and waits until it is gone.
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "pod "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// restartSchedulerWithArgs replaces the suite's scheduler by one named
// name whose TopologyPlacement args are deploy/'s with args set, until the
// test ends; then the suite's scheduler runs again.
func restartSchedulerWithArgs(t *testing.T, name string, args map[string]any) {
	t.Helper()
	cfg, err := localcluster.DeployedSchedulerConfig(cluster.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range localcluster.TopologyPlacementArgs(cfg) {
		maps.Copy(a, args)
	}
	comp, err := cluster.KubeSchedulerComponent(name, lockstep.SchedulerName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	replaceScheduler(t, comp)
}
