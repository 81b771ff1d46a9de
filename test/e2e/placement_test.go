package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

const leafLabel = lockstep.LabelFabricTier0

// nodesByLeaf groups the model's node names by leaf, in name order.
func nodesByLeaf() map[string][]string {
	out := map[string][]string{}
	for _, n := range cluster.Model.Nodes() {
		out[n.Labels[leafLabel]] = append(out[n.Labels[leafLabel]], n.Name)
	}
	return out
}

// fill pins a non-gang pod of gpus GPUs to each node.
func fill(t *testing.T, ns, prefix string, gpus int64, nodes []string) {
	t.Helper()
	for i, node := range nodes {
		pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", prefix, i), ns).GPUs(gpus).SchedulerName(localcluster.SchedulerName).Obj()
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		cluster.CreatePods(t, pod)
	}
}

// createGang creates a PodGroup of members pods of gpus GPUs each.
func createGang(t *testing.T, ns, name string, members int, gpus int64, annotations map[string]string) {
	t.Helper()
	pg := utiltesting.MakePodGroup(name, ns, int32(members)).Obj()
	pg.Annotations = annotations
	if err := cluster.Client.Create(context.Background(), pg); err != nil {
		t.Fatal(err)
	}
	for i := range members {
		cluster.CreatePods(t, utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).GPUs(gpus).
			SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj())
	}
}

// gangPods returns the pods of a gang.
func gangPods(ctx context.Context, ns, gang string) ([]corev1.Pod, error) {
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: schedv1alpha1.PodGroupLabel + "=" + gang})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func waitGangBound(t *testing.T, ns, gang string, members int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, timeout, "gang "+gang+" bound", func(ctx context.Context) (bool, error) {
		all, err := gangPods(ctx, ns, gang)
		if err != nil {
			return false, nil
		}
		pods = framework.BoundPods(all)
		return len(pods) == members, nil
	})
	if err != nil {
		t.Fatalf("%v: %d of %d bound", err, len(pods), members)
	}
	return pods
}

func waitRunningAllocated(t *testing.T, ns string, n int) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "filler pods running", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGangLandsInsideOneLeaf: leaf-0 has exactly four empty nodes; the other
// leaves have more free GPUs in total but no four empty nodes. A gang of four
// 8-GPU members must land whole in leaf-0.
func TestGangLandsInsideOneLeaf(t *testing.T) {
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	fill(t, ns, "full", 8, leaves["leaf-0"][:4])
	var partial []string
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		partial = append(partial, leaves[leaf]...)
	}
	fill(t, ns, "partial", 2, partial)
	waitRunningAllocated(t, ns, 4+len(partial))

	createGang(t, ns, "ddp", 4, 8, nil)
	pods := waitGangBound(t, ns, "ddp", 4, time.Minute)
	nodeLeaf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		nodeLeaf[n.Name] = n.Labels[leafLabel]
	}
	for _, p := range pods {
		if nodeLeaf[p.Spec.NodeName] != "leaf-0" {
			t.Errorf("member %s on %s in %s, want leaf-0", p.Name, p.Spec.NodeName, nodeLeaf[p.Spec.NodeName])
		}
		if got := p.Annotations[lockstep.AnnotationGPUs]; got != "0,1,2,3,4,5,6,7" {
			t.Errorf("member %s: %s=%q, want all eight GPUs", p.Name, lockstep.AnnotationGPUs, got)
		}
	}
	pg := &schedv1alpha1.PodGroup{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "ddp"}, pg); err != nil {
		t.Fatal(err)
	}
	if pg.Annotations[lockstep.AnnotationPlacementLevel] != "leaf" {
		t.Errorf("PodGroup placement annotations %v, want level leaf", pg.Annotations)
	}
	eff, err := strconv.ParseFloat(pg.Annotations[lockstep.AnnotationPlacementEfficiency], 64)
	if err != nil || eff <= 0 || eff > 1 {
		t.Errorf("placement efficiency %q, want a number in (0, 1]", pg.Annotations[lockstep.AnnotationPlacementEfficiency])
	}
}

// TestPreferredGangSkipsLevelsTooSmall: a gang of 80 GPUs that prefers a
// leaf, on leaves of 64 GPUs, cannot ever fit its level, so it is placed in
// the spine at once rather than after deploy's 30 s preferredWait.
func TestPreferredGangSkipsLevelsTooSmall(t *testing.T) {
	ns := cluster.NewNamespace(t)
	const members = 10 // x 8 GPUs = 80; a leaf has 8 nodes of 8
	start := time.Now()
	createGang(t, ns, "wide", members, 8, map[string]string{
		lockstep.AnnotationTopologyLevel: "leaf",
		lockstep.AnnotationTopologyMode:  "Preferred",
	})
	// Binding 10 pods takes a second or two; waiting out one preferredWait
	// would take 30 s.
	pods := waitGangBound(t, ns, "wide", members, 20*time.Second)
	t.Logf("gang of %d bound %s after creation", members, time.Since(start).Round(100*time.Millisecond))
	spine := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		spine[n.Name] = n.Labels[lockstep.LabelFabricTier1]
	}
	spines := map[string]bool{}
	for _, p := range pods {
		spines[spine[p.Spec.NodeName]] = true
	}
	if len(spines) != 1 {
		t.Errorf("members in spines %v, want one", spines)
	}
	pg := &schedv1alpha1.PodGroup{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "wide"}, pg); err != nil {
		t.Fatal(err)
	}
	if got := pg.Annotations[lockstep.AnnotationPlacementLevel]; got != "spine" {
		t.Errorf("placement level %q, want spine", got)
	}
}

// TestCompetingGangsNeverDeadlock: two gangs each needing 62.5% of the
// cluster are submitted together. One must run whole while the other holds
// no pod at all; when the first finishes, the second runs. Repeated.
func TestCompetingGangsNeverDeadlock(t *testing.T) {
	repeats := 20
	if v, err := strconv.Atoi(os.Getenv("E2E_DEADLOCK_REPEATS")); err == nil && v > 0 {
		repeats = v
	}
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	const members = 20 // x 8 GPUs = 160 of 256
	for round := range repeats {
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		createGang(t, ns, a, members, 8, nil)
		createGang(t, ns, b, members, 8, nil)

		var first, second string
		err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "one gang bound whole", func(ctx context.Context) (bool, error) {
			pa, errA := gangPods(ctx, ns, a)
			pb, errB := gangPods(ctx, ns, b)
			if errA != nil || errB != nil {
				return false, nil
			}
			na, nb := len(framework.BoundPods(pa)), len(framework.BoundPods(pb))
			if na > 0 && nb > 0 {
				return false, fmt.Errorf("round %d: both gangs partly bound (%d and %d): deadlock risk", round, na, nb)
			}
			switch {
			case na == members:
				first, second = a, b
			case nb == members:
				first, second = b, a
			}
			return first != "", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The other gang must stay entirely unbound while the first runs.
		if pods, _ := gangPods(ctx, ns, second); len(framework.BoundPods(pods)) != 0 {
			t.Fatalf("round %d: gang %s has pods bound while %s holds the cluster", round, second, first)
		}
		deleteGang(t, ns, first)
		waitGangBound(t, ns, second, members, 2*time.Minute)
		deleteGang(t, ns, second)
		t.Logf("round %d: %s ran, then %s", round, first, second)
	}
}

func deleteGang(t *testing.T, ns, gang string) {
	t.Helper()
	ctx := context.Background()
	before, err := gangPods(ctx, ns, gang)
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, p := range before {
		uids[string(p.UID)] = true
	}
	err = cluster.Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: schedv1alpha1.PodGroupLabel + "=" + gang})
	if err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "gang "+gang+" gone", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, gang)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The next round starts from a settled cluster: the agents have
	// reported the gang's GPUs free.
	err = cluster.WaitGPUsReleased(ctx, "GPUs of gang "+gang, func(a v1alpha1.GPUAllocation) bool { return uids[a.PodUID] })
	if err != nil {
		t.Fatal(err)
	}
}

// TestRequiredConstraintUnmetBindsNothing: nine 8-GPU members with a Required
// leaf constraint cannot fit in a leaf of eight nodes. Nothing is bound, and
// the pods' events name the constraint.
func TestRequiredConstraintUnmetBindsNothing(t *testing.T) {
	ns := cluster.NewNamespace(t)
	createGang(t, ns, "wide", 9, 8, map[string]string{
		lockstep.AnnotationTopologyLevel: "leaf",
		lockstep.AnnotationTopologyMode:  "Required",
	})
	// Members that arrive before the gang is complete are turned away by
	// Coscheduling's sibling count; the ones that reach TopologyPlacement
	// carry its reason.
	var message string
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, "FailedScheduling naming the constraint", func(ctx context.Context) (bool, error) {
		for i := range 9 {
			events, err := cluster.Events(ctx, ns, "Pod", fmt.Sprintf("wide-%d", i))
			if err != nil {
				return false, nil
			}
			for _, e := range events {
				if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "does not fit in any leaf") && strings.Contains(e.Message, "Required") {
					message = e.Message
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("event: %s", message)
	assertNoneBound(t, ns)
}

// TestSchedulerKilledMidGangEndsWhole: the scheduler is killed the moment
// the first member of a gang is bound, while the others are still being
// bound, and started again. The gang ends fully bound, never part bound.
func TestSchedulerKilledMidGangEndsWhole(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	const members = 24
	for round := range 3 {
		gang := fmt.Sprintf("crash%d", round)
		watcher, err := cluster.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: schedv1alpha1.PodGroupLabel + "=" + gang})
		if err != nil {
			t.Fatal(err)
		}
		createGang(t, ns, gang, members, 8, nil)
		for ev := range watcher.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				break
			}
		}
		watcher.Stop()
		if err := cluster.KillComponent("scheduler"); err != nil {
			t.Fatal(err)
		}
		pods, err := gangPods(ctx, ns, gang)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: scheduler killed with %d of %d members bound", round, len(framework.BoundPods(pods)), members)
		comp, err := cluster.SchedulerComponent()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.StartComponent(ctx, comp); err != nil {
			t.Fatal(err)
		}
		waitGangBound(t, ns, gang, members, 2*time.Minute)
		deleteGang(t, ns, gang)
	}
}

// TestTwoGPUPodOnDGX1GetsNVLinkPair: on the hybrid cube-mesh, a 2-GPU pod
// gets a pair joined by NVLink, chosen by the scheduler and honoured by the
// (emulated) device plugin.
func TestTwoGPUPodOnDGX1GetsNVLinkPair(t *testing.T) {
	ctx := context.Background()
	model := *cluster.Model
	model.Pools = []clustermodel.Pool{{Name: "dgx1", Profile: "dgx1-v100", Nodes: 1, NodesPerDomain: map[string]int{}}}
	for _, l := range model.Levels {
		model.Pools[0].NodesPerDomain[l.Name] = 1
	}
	nodes := model.Nodes()
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	node := nodes[0].Name
	waitNodeTopology(t, node, "published", func(*v1alpha1.NodeTopology) bool { return true })

	ns := cluster.NewNamespace(t)
	// A first pod takes a pair, so the second choice is not the trivial one.
	for i := range 2 {
		pod := utiltesting.MakePod(fmt.Sprintf("pair-%d", i), ns).GPUs(2).SchedulerName(localcluster.SchedulerName).Obj()
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		cluster.CreatePods(t, pod)
		waitBound(t, ns, pod.Name)
	}
	p, _ := topology.LookupProfile("dgx1-v100")
	hw, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	used := topology.GPUSet(0)
	for i := range 2 {
		pod, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("pair-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		set, err := topology.ParseGPUList(pod.Annotations[lockstep.AnnotationGPUs])
		if err != nil || set.Len() != 2 {
			t.Fatalf("pod %s: %s=%q: %v", pod.Name, lockstep.AnnotationGPUs, pod.Annotations[lockstep.AnnotationGPUs], err)
		}
		idx := set.Indices()
		if link := hw.Link(idx[0], idx[1]); !link.Class.IsNVLink() {
			t.Errorf("pod %s got GPUs %v joined by %s, want NVLink", pod.Name, idx, link.Token())
		}
		if set&used != 0 {
			t.Errorf("pod %s got GPUs %v already given out", pod.Name, idx)
		}
		used |= set
	}
}

// TestMixedSizeGang: a gang whose members ask for different GPU counts (a
// parameter server with none, a chief with two, workers with eight) is bound
// whole; only GPU members get GPUs, and no GPU is given twice.
func TestMixedSizeGang(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	if err := cluster.Client.Create(ctx, utiltesting.MakePodGroup("mixed", ns, 6).Obj()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"mixed-ps": 0, "mixed-chief": 2}
	for i := range 4 {
		want[fmt.Sprintf("mixed-worker-%d", i)] = 8
	}
	for name, gpus := range want {
		pod := utiltesting.MakePod(name, ns).SchedulerName(localcluster.SchedulerName).PodGroup("mixed")
		if gpus > 0 {
			pod = pod.GPUs(gpus)
		}
		cluster.CreatePods(t, pod.Obj())
	}
	pods := waitGangBound(t, ns, "mixed", len(want), time.Minute)
	used := map[string]topology.GPUSet{}
	for _, p := range pods {
		list, has := p.Annotations[lockstep.AnnotationGPUs]
		if want[p.Name] == 0 {
			if has {
				t.Errorf("%s asks for no GPUs but was given %q", p.Name, list)
			}
			continue
		}
		set, err := topology.ParseGPUList(list)
		if err != nil || int64(set.Len()) != want[p.Name] {
			t.Errorf("%s: %s=%q, want %d GPUs", p.Name, lockstep.AnnotationGPUs, list, want[p.Name])
			continue
		}
		if used[p.Spec.NodeName]&set != 0 {
			t.Errorf("%s got GPUs %v on %s already given to another member", p.Name, set, p.Spec.NodeName)
		}
		used[p.Spec.NodeName] |= set
	}
}

// TestWaitingGangDrainsItsLeaf: a gang of five whole nodes names no level,
// so it is placed tightest first; no leaf has five free nodes. It drains
// leaf-0, the leaf nearest to holding it, and says so. A GPU pod outside
// gangs arriving meanwhile is kept off leaf-0's free nodes, but one of
// higher priority is not; when two of leaf-0's jobs end, the gang lands
// whole in leaf-0 rather than spread.
func TestWaitingGangDrainsItsLeaf(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	_, nodeLeaf := fillLeavesForADrain(t, ns)

	createGang(t, ns, "ddp", 5, 8, nil)
	var message string
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the gang draining leaf-0", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, "ddp")
		if err != nil {
			return false, nil
		}
		for i := range pods {
			if c := podScheduledCondition(&pods[i]); c != nil && strings.Contains(c.Message, "draining leaf") {
				message = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v: no member's PodScheduled condition names a drained leaf", err)
	}
	if !strings.Contains(message, "leaf=leaf-0 for it") {
		t.Errorf("the gang drains another leaf than leaf-0, the one with room for the most members: %q", message)
	}

	single := utiltesting.MakePod("single", ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
	cluster.CreatePods(t, single)
	if node := waitBound(t, ns, "single"); nodeLeaf[node] == "leaf-0" {
		t.Errorf("the single pod was bound to %s in the drained leaf-0", node)
	}

	// A pod that outranks the gang is not kept off: pinned to leaf-0 by
	// its node selector, it binds there. It then ends, before the jobs.
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-urgent"}, Value: 1000}
	if err := cluster.Client.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), pc) })
	waitPriorityClassAdmitted(t, ns, pc.Name)
	urgent := utiltesting.MakePod("urgent", ns).GPUs(1).SchedulerName(localcluster.SchedulerName).Obj()
	urgent.Spec.PriorityClassName = pc.Name
	urgent.Spec.NodeSelector = map[string]string{leafLabel: "leaf-0"}
	cluster.CreatePods(t, urgent)
	if node := waitBound(t, ns, "urgent"); nodeLeaf[node] != "leaf-0" {
		t.Errorf("the urgent pod was bound to %s, outside leaf-0", node)
	}
	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, "urgent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Two of leaf-0's jobs end: the leaf now holds the gang.
	for _, name := range []string{"busy0-0", "busy0-1"} {
		if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range waitGangBound(t, ns, "ddp", 5, time.Minute) {
		if nodeLeaf[p.Spec.NodeName] != "leaf-0" {
			t.Errorf("member %s on %s in %s, want leaf-0", p.Name, p.Spec.NodeName, nodeLeaf[p.Spec.NodeName])
		}
	}
}

// drainedNodes reads the scheduler's drained_nodes gauge.
func drainedNodes(ctx context.Context) (float64, error) {
	s, err := cluster.Scrape(ctx, "scheduler")
	if err != nil {
		return 0, err
	}
	return s.Find("lockstep_scheduler_drained_nodes", nil).Sum(), nil
}

// waitDrainedNodes waits until the drained_nodes gauge reads want and
// returns when it first did.
func waitDrainedNodes(t *testing.T, want float64, timeout time.Duration) time.Time {
	t.Helper()
	var got float64
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, timeout, fmt.Sprintf("drained_nodes %v", want), func(ctx context.Context) (bool, error) {
		var err error
		got, err = drainedNodes(ctx)
		return err == nil && got == want, nil
	})
	if err != nil {
		t.Fatalf("%v: it reads %v", err, got)
	}
	return time.Now()
}

// TestSuspendedJobReleasesItsDrain: a TrainingJob of five whole nodes
// drains leaf-0, the leaf nearest to holding it, as in
// TestWaitingGangDrainsItsLeaf. The job is then suspended: the controller
// deletes its pods and keeps its PodGroup. Nobody waits for the domain any
// more, so
// the drain is released at once, not when the domain stalls eight
// preferredWaits later (4 minutes as deployed): drained_nodes reads 0
// within seconds, and a gang of three whole nodes that requires a leaf,
// which only leaf-0 can hold, binds there.
func TestSuspendedJobReleasesItsDrain(t *testing.T) {
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	leaves, nodeLeaf := fillLeavesForADrain(t, ns)
	if n, err := drainedNodes(ctx); err != nil || n != 0 {
		t.Fatalf("drained_nodes reads %v (%v) before the test drains anything", n, err)
	}

	createJob(t, gangJob(ns, "ddp", 4, 8).Obj()) // a master and 4 workers of 8 GPUs
	drainedAt := waitDrainedNodes(t, float64(len(leaves["leaf-0"])), time.Minute)
	wait, err := localcluster.DeployedPreferredWait(cluster.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	stall := 8 * wait

	if bound, err := jobPodsOf(ctx, ns, "ddp"); err == nil {
		for _, p := range bound {
			if p.Spec.NodeName != "" {
				t.Fatalf("pod %s was bound to %s before the suspension: the gang was placed, not waiting on its drain", p.Name, p.Spec.NodeName)
			}
		}
	}
	job := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ddp"}}
	suspend := []byte(`{"spec":{"runPolicy":{"suspend":true}}}`)
	if err := cluster.Client.Patch(ctx, job, client.RawPatch(types.MergePatchType, suspend)); err != nil {
		t.Fatal(err)
	}
	suspended := time.Now()
	released := waitDrainedNodes(t, 0, stall/2)
	t.Logf("drain held %s, released %s after suspension (the stall would release it %s after its last progress)",
		suspended.Sub(drainedAt).Round(10*time.Millisecond), released.Sub(suspended).Round(10*time.Millisecond), stall)
	if took := released.Sub(suspended); took > 10*time.Second {
		t.Errorf("drain released %s after suspension, want at once (under 10 s)", took.Round(10*time.Millisecond))
	}
	if err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the suspended job's pods gone", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, "ddp")
		return err == nil && len(pods) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}

	createGang(t, ns, "next", 3, 8, map[string]string{
		lockstep.AnnotationTopologyLevel: "leaf",
		lockstep.AnnotationTopologyMode:  "Required",
	})
	for _, p := range waitGangBound(t, ns, "next", 3, 30*time.Second) {
		if nodeLeaf[p.Spec.NodeName] != "leaf-0" {
			t.Errorf("member %s on %s in %s, want leaf-0", p.Name, p.Spec.NodeName, nodeLeaf[p.Spec.NodeName])
		}
	}
	if n, err := drainedNodes(ctx); err != nil || n != 0 {
		t.Errorf("drained_nodes reads %v (%v) after the next gang was placed, want 0", n, err)
	}
}

// fillLeavesForADrain fills five nodes of leaf-0 and six of every other
// leaf with whole-node pods and waits for them to run, so that a gang of
// five whole nodes fits no leaf and leaf-0 is the one nearest to holding
// it. It returns the nodes by leaf and the leaf of each node.
func fillLeavesForADrain(t *testing.T, ns string) (leaves map[string][]string, nodeLeaf map[string]string) {
	t.Helper()
	leaves = nodesByLeaf()
	fill(t, ns, "busy0", 8, leaves["leaf-0"][:5])
	busy := 5
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		fill(t, ns, "busy-"+leaf, 8, leaves[leaf][:6])
		busy += 6
	}
	waitRunningAllocated(t, ns, busy)
	nodeLeaf = map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		nodeLeaf[n.Name] = n.Labels[leafLabel]
	}
	return leaves, nodeLeaf
}
