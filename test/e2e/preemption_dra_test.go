package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
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
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	withClass := func(class string) func(*corev1.Pod) {
		return func(pod *corev1.Pod) {
			pod.Spec.PriorityClassName = class
			pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
		}
	}

	createDRAGangOf(t, ns, "old", 2, 4, withClass(low))
	old := waitDRAGangRunning(t, ns, "old", 2)
	waitPastStart(t, old)
	createDRAGangOf(t, ns, "young", 2, 4, withClass(low))
	young := waitDRAGangRunning(t, ns, "young", 2)
	youngClaims := claimsOf(t, ns, young)

	createDRAGangOf(t, ns, "urgent", 2, 4, withClass(high))
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
	oldNow, err := gangPods(ctx, ns, "old")
	if err != nil {
		t.Fatal(err)
	}
	if len(oldNow) != 2 {
		t.Errorf("gang old has %d pods, want its 2", len(oldNow))
	}
	for _, p := range oldNow {
		if p.UID != old[p.Name].UID || p.DeletionTimestamp != nil {
			t.Errorf("gang old lost pod %s: the preemption took more than the cheapest gang", p.Name)
		}
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
