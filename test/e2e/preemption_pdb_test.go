package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestPreemptionSparesBudgetedGang: two low-priority gangs of a whole leaf
// each; the younger (the cheaper victim) is covered by a
// PodDisruptionBudget that allows no disruption, and work of high priority
// holds the other two leaves. A high-priority gang that needs a whole leaf
// evicts the older gang, whose eviction breaks no budget, and runs in its
// leaf; the budgeted gang keeps every pod.
func TestPreemptionSparesBudgetedGang(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	gang := func(name, class string) {
		pg := utiltesting.MakePodGroup(name, ns, 8).Obj()
		pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: lockstep.LevelLeaf, lockstep.AnnotationTopologyMode: string(lockstep.Required)}
		if err := cluster.Client.Create(ctx, pg); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).GPUs(8).SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj()
			pod.Spec.PriorityClassName = class
			pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
			cluster.CreatePods(t, pod)
		}
	}
	leafOf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leafOf[n.Name] = n.Labels[leafLabel]
	}
	gang("older", low)
	older := waitGangBound(t, ns, "older", 8, 2*time.Minute)
	byName := map[string]corev1.Pod{}
	for _, p := range older {
		byName[p.Name] = p
	}
	waitPastStart(t, byName)
	gang("younger", low)
	younger := waitGangBound(t, ns, "younger", 8, 2*time.Minute)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "younger"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(8)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{schedv1alpha1.PodGroupLabel: "younger"}},
		},
	}
	if err := cluster.Client.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager's disruption controller works out what the
	// budget allows.
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the budget's status", func(ctx context.Context) (bool, error) {
		got, err := cluster.Clientset.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "younger", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.ExpectedPods == 8 && got.Status.DisruptionsAllowed == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fillRest(t, ns, high)
	before := livePods(t, ns)

	gang("urgent", high)
	running := waitGangBound(t, ns, "urgent", 8, 2*time.Minute)
	if leafOf[running[0].Spec.NodeName] != leafOf[older[0].Spec.NodeName] {
		t.Errorf("urgent runs in %s; the unbudgeted gang ran in %s", leafOf[running[0].Spec.NodeName], leafOf[older[0].Spec.NodeName])
	}
	for _, p := range younger {
		if q, ok := livePods(t, ns)[p.Name]; !ok || q.UID != before[p.Name].UID {
			t.Errorf("budgeted gang lost pod %s", p.Name)
		}
	}
	for _, p := range older {
		if by := victimEventPreemptors(t, ns, p.Name); len(by) != 1 || by[0] != ns+"/urgent" {
			t.Errorf("victim %s preempted for %v, want %s/urgent", p.Name, by, ns)
		}
	}
}
