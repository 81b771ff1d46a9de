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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// useDevicePluginAgent replaces the suite's fake agent by one whose
// emulated device plugin ignores lockstep.dev/gpus and picks its own free
// GPUs (lockstep.FakeAllocationDevicePlugin), as the stock NVIDIA device
// plugin does, and puts the default one back when the test ends. Both keep
// the allocations already in NodeTopology, as a device plugin's checkpoint
// does.
func useDevicePluginAgent(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	start := func(allocation string) {
		if err := cluster.KillComponent("topology-agent"); err != nil {
			t.Fatal(err)
		}
		comp, err := cluster.FakeAgentComponentWith(allocation)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.StartComponent(ctx, comp); err != nil {
			t.Fatal(err)
		}
	}
	start(lockstep.FakeAllocationDevicePlugin)
	t.Cleanup(func() { start(lockstep.FakeAllocationScheduler) })
}

// waitNodeIdle waits until node's agent reports no GPU held.
func waitNodeIdle(t *testing.T, node string) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, 2*time.Minute, "node "+node+" holds no GPU", func(ctx context.Context) (bool, error) {
		var nt v1alpha1.NodeTopology
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: node}, &nt); err != nil {
			return false, nil
		}
		return len(nt.Status.Allocations) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gpusOf is how many GPUs a pod holds while it runs.
func gpusOf(p *corev1.Pod) int {
	n := 0
	for _, c := range p.Spec.Containers {
		q := c.Resources.Limits[lockstep.GPUResource]
		n += int(q.Value())
	}
	return n
}

// allocationsAgree checks what the node agents report against the pods: on
// every node, no GPU is allocated twice, every allocation is a live pod
// bound there with as many GPUs as it requests, and the GPUs allocated add
// up to the GPU requests of the live pods bound there (none lost, none
// counted twice). It returns the problems, none when they agree, and each
// pod's allocation by namespace/name.
func allocationsAgree(ctx context.Context) ([]string, map[string]topology.GPUSet, error) {
	pods, err := cluster.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var nts v1alpha1.NodeTopologyList
	if err := cluster.Client.List(ctx, &nts); err != nil {
		return nil, nil, err
	}
	type live struct {
		name, node string
		gpus       int
	}
	byUID := map[string]live{}
	requested := map[string]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || gpusOf(p) == 0 {
			continue
		}
		byUID[string(p.UID)] = live{p.Namespace + "/" + p.Name, p.Spec.NodeName, gpusOf(p)}
		requested[p.Spec.NodeName] += gpusOf(p)
	}
	var problems []string
	got := map[string]topology.GPUSet{}
	allocated := map[string]int{}
	for _, nt := range nts.Items {
		var used topology.GPUSet
		for _, a := range nt.Status.Allocations {
			var set topology.GPUSet
			for _, g := range a.GPUs {
				set |= topology.NewGPUSet(int(g))
			}
			if used&set != 0 {
				problems = append(problems, fmt.Sprintf("%s: GPUs %v of %s/%s allocated twice", nt.Name, used&set, a.Namespace, a.Pod))
			}
			used |= set
			allocated[nt.Name] += set.Len()
			p, ok := byUID[a.PodUID]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: allocation of %s/%s, which is not a live GPU pod", nt.Name, a.Namespace, a.Pod))
			case p.node != nt.Name:
				problems = append(problems, fmt.Sprintf("%s: allocation of %s, bound to %s", nt.Name, p.name, p.node))
			case p.gpus != set.Len():
				problems = append(problems, fmt.Sprintf("%s: %s holds %d GPUs, requests %d", nt.Name, p.name, set.Len(), p.gpus))
			}
			got[a.Namespace+"/"+a.Pod] = set
		}
	}
	for _, nt := range nts.Items {
		if allocated[nt.Name] != requested[nt.Name] {
			problems = append(problems, fmt.Sprintf("%s: %d GPUs allocated, pods bound there request %d", nt.Name, allocated[nt.Name], requested[nt.Name]))
		}
	}
	slices.Sort(problems)
	return problems, got, nil
}

// waitAllocationsAgree waits until the agents' allocations agree with the
// pods (allocationsAgree) and returns each pod's allocation.
func waitAllocationsAgree(t *testing.T) map[string]topology.GPUSet {
	t.Helper()
	var problems []string
	var got map[string]topology.GPUSet
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, "NodeTopology allocations agree with the pods", func(ctx context.Context) (bool, error) {
		var err error
		problems, got, err = allocationsAgree(ctx)
		return err == nil && len(problems) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v:\n%s", err, strings.Join(problems, "\n"))
	}
	return got
}

// pinnedGang creates a PodGroup of members pods of gpus GPUs each, all
// required onto node.
func pinnedGang(t *testing.T, ns, name, node string, members int, gpus int64) {
	t.Helper()
	if err := cluster.Client.Create(context.Background(), utiltesting.MakePodGroup(name, ns, int32(members)).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range members {
		pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).GPUs(gpus).SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj()
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		cluster.CreatePods(t, pod)
	}
}

// waitPodEvent waits for an event with reason on a pod and returns its
// message.
func waitPodEvent(t *testing.T, ns, pod, reason string) string {
	t.Helper()
	var msg string
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, reason+" event on pod "+pod, func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "Pod", pod)
		if err != nil {
			return false, nil
		}
		for _, e := range events {
			if e.Reason == reason {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestForeignGPUAnnotationsHideNoGPU: pods the scheduler did not place
// carry lockstep.dev/gpus: a DaemonSet-like pod on every node, bound by
// nodeName (no scheduler), requesting no GPU and naming all eight; on one
// node a pod of lockstep-scheduler's name, also bound by nodeName, that
// requests none, one naming GPUs the node does not have and one naming
// more than it requests. None is adopted, each gets a GPUAnnotationIgnored
// event, and none hides a GPU: a gang of whole nodes binds, and a gang
// pinned to the node with the bad annotations takes every GPU they leave.
func TestForeignGPUAnnotationsHideNoGPU(t *testing.T) {
	ns := cluster.NewNamespace(t)
	all := "0,1,2,3,4,5,6,7"
	nodes := cluster.Model.Nodes()
	var ignored []string
	for i, n := range nodes {
		ds := utiltesting.MakePod(fmt.Sprintf("ds-%d", i), ns).Obj()
		ds.Spec.NodeName = n.Name
		ds.Annotations = map[string]string{lockstep.AnnotationGPUs: all}
		cluster.CreatePods(t, ds)
		ignored = append(ignored, ds.Name)
	}
	// The issue's own spelling of the DaemonSet's annotation, a range.
	ranged := utiltesting.MakePod("ds-range", ns).Obj()
	ranged.Spec.NodeName = nodes[1].Name
	ranged.Annotations = map[string]string{lockstep.AnnotationGPUs: "0-7"}
	target := nodes[0].Name
	noGPU := utiltesting.MakePod("ours-no-gpu", ns).SchedulerName(localcluster.SchedulerName).Obj()
	noGPU.Annotations = map[string]string{lockstep.AnnotationGPUs: all}
	missing := utiltesting.MakePod("missing-index", ns).GPUs(1).SchedulerName(localcluster.SchedulerName).Obj()
	missing.Annotations = map[string]string{lockstep.AnnotationGPUs: "9"}
	greedy := utiltesting.MakePod("greedy", ns).GPUs(1).SchedulerName(localcluster.SchedulerName).Obj()
	greedy.Annotations = map[string]string{lockstep.AnnotationGPUs: "0,1,2,3"}
	for _, p := range []*corev1.Pod{noGPU, missing, greedy} {
		p.Spec.NodeName = target
	}
	cluster.CreatePods(t, ranged, noGPU, missing, greedy)
	ignored = append(ignored, ranged.Name, noGPU.Name, missing.Name, greedy.Name)
	for _, name := range []string{"ds-0", ranged.Name, noGPU.Name, missing.Name, greedy.Name} {
		t.Logf("%s: %s", name, waitPodEvent(t, ns, name, topologyplacement.EventGPUAnnotationIgnored))
	}
	for _, name := range ignored {
		waitPodEvent(t, ns, name, topologyplacement.EventGPUAnnotationIgnored)
	}

	// Every node carries a pod naming all its GPUs: had one been adopted,
	// no node would have a free GPU for the planner.
	createGang(t, ns, "whole", 4, 8, nil)
	for _, p := range waitGangBound(t, ns, "whole", 4, time.Minute) {
		if p.Spec.NodeName == target {
			t.Errorf("member %s bound to %s, where two GPUs are taken", p.Name, target)
		}
	}
	// The target's two 1-GPU pods hold two GPUs; the six others are free.
	pinnedGang(t, ns, "rest", target, 3, 2)
	waitGangBound(t, ns, "rest", 3, time.Minute)
	got := waitAllocationsAgree(t)
	var onTarget topology.GPUSet
	for _, name := range []string{"missing-index", "greedy", "rest-0", "rest-1", "rest-2"} {
		onTarget |= got[ns+"/"+name]
	}
	if onTarget != topology.AllGPUs(8) {
		t.Errorf("GPUs allocated on %s: %v, want all eight", target, onTarget)
	}
	s := scrape(t, "scheduler")
	t.Logf("scheduler holds %v plans, %v GPUs for open slots", s.Find("lockstep_scheduler_plans_held", nil).Sum(), s.Find("lockstep_scheduler_held_gpus", nil).Sum())
	deleteGang(t, ns, "whole")
	deleteGang(t, ns, "rest")
	waitBooksEmpty(t)
}

// TestDevicePluginModeGangsEndWhole runs the scheduler against a fake agent
// that behaves like the stock NVIDIA device plugin: it never reads
// lockstep.dev/gpus and gives each pod its own choice of free GPUs (the
// highest-indexed), published in NodeTopology as the real agent publishes
// what the kubelet's pod-resources API says.
//
//   - Placement: a 4-GPU pod on a node gets other GPUs than the scheduler
//     chose; a gang pinned to that node still takes the other half (the
//     books hold what the agent reported, not the choice).
//   - Restart: a gang of 4-GPU members is deleted and recreated whole,
//     twice; it binds whole each time.
//   - Competing gangs: two gangs of 4-GPU members, each more than half the
//     cluster, submitted together: one binds whole while the other holds
//     nothing, then the other.
//
// After each step, every node's allocations agree with the pods bound
// there (no GPU allocated twice, none lost), and at the end the scheduler
// holds no plan and no GPU.
func TestDevicePluginModeGangsEndWhole(t *testing.T) {
	useDevicePluginAgent(t)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	node := nodesByLeaf()["leaf-3"][7]
	// Pods of earlier tests may still be leaving the node: its agent
	// reports their GPUs until they are gone, and the scheduler chooses
	// only among GPUs the agent reports free.
	waitNodeIdle(t, node)

	// Placement.
	first := utiltesting.MakePod("first", ns).GPUs(4).SchedulerName(localcluster.SchedulerName).Obj()
	first.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	cluster.CreatePods(t, first)
	waitBound(t, ns, "first")
	got := waitAllocationsAgree(t)
	p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chosen, err := topology.ParseGPUList(p.Annotations[lockstep.AnnotationGPUs])
	if err != nil {
		t.Fatalf("first: %s=%q: %v", lockstep.AnnotationGPUs, p.Annotations[lockstep.AnnotationGPUs], err)
	}
	if got[ns+"/first"] == chosen {
		t.Fatalf("the device plugin gave first the GPUs the scheduler chose (%v): the test would prove nothing", chosen)
	}
	t.Logf("first: the scheduler chose %v, the device plugin gave %v", chosen, got[ns+"/first"])
	pinnedGang(t, ns, "half", node, 1, 4)
	waitGangBound(t, ns, "half", 1, 30*time.Second)
	got = waitAllocationsAgree(t)
	if both := got[ns+"/first"] | got[ns+"/half-0"]; both != topology.AllGPUs(8) {
		t.Errorf("%s: first and half-0 hold %v, want all eight GPUs", node, both)
	}

	// A gang restarted whole, twice.
	const restartMembers = 6
	createGang(t, ns, "restart", restartMembers, 4, nil)
	waitGangBound(t, ns, "restart", restartMembers, time.Minute)
	waitAllocationsAgree(t)
	for round := range 2 {
		deleteGang(t, ns, "restart")
		for i := range restartMembers {
			cluster.CreatePods(t, utiltesting.MakePod(fmt.Sprintf("restart-%d", i), ns).GPUs(4).
				SchedulerName(localcluster.SchedulerName).PodGroup("restart").Obj())
		}
		waitGangBound(t, ns, "restart", restartMembers, time.Minute)
		waitAllocationsAgree(t)
		t.Logf("restart %d: gang bound whole", round)
	}
	deleteGang(t, ns, "restart")
	deleteGang(t, ns, "half")
	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Competing gangs: 34 members of 4 GPUs each are 136 of 256 GPUs.
	const members = 34
	for round := range 2 {
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		createGang(t, ns, a, members, 4, nil)
		createGang(t, ns, b, members, 4, nil)
		var winner, loser string
		err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "one gang bound whole", func(ctx context.Context) (bool, error) {
			na, errA := gangBound(ctx, ns, a)
			nb, errB := gangBound(ctx, ns, b)
			if errA != nil || errB != nil {
				return false, nil
			}
			if na > 0 && nb > 0 {
				return false, fmt.Errorf("round %d: both gangs partly bound (%d and %d)", round, na, nb)
			}
			switch {
			case na == members:
				winner, loser = a, b
			case nb == members:
				winner, loser = b, a
			}
			return winner != "", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := gangBound(ctx, ns, loser); n != 0 {
			t.Fatalf("round %d: %s has %d pods bound while %s holds the cluster", round, loser, n, winner)
		}
		waitAllocationsAgree(t)
		deleteGang(t, ns, winner)
		waitGangBound(t, ns, loser, members, 2*time.Minute)
		waitAllocationsAgree(t)
		deleteGang(t, ns, loser)
		t.Logf("round %d: %s ran, then %s", round, winner, loser)
	}
	waitBooksEmpty(t)
	got = waitAllocationsAgree(t)
	for pod := range got {
		if strings.HasPrefix(pod, ns+"/") {
			t.Errorf("%s still holds GPUs after it was deleted", pod)
		}
	}
}
