package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// gangSpec is a gang of members pods of gpus GPUs each.
type gangSpec struct {
	name    string
	members int
	gpus    int64
}

// createGangE creates a gang's PodGroup, then all its pods at once,
// without failing the test, so that goroutines can create gangs
// concurrently.
func createGangE(ctx context.Context, ns string, g gangSpec, annotations map[string]string) error {
	pg := utiltesting.MakePodGroup(g.name, ns, int32(g.members)).Obj()
	pg.Annotations = annotations
	if err := cluster.Client.Create(ctx, pg); err != nil {
		return fmt.Errorf("creating PodGroup %s: %w", g.name, err)
	}
	return parallel(g.members, func(i int) error {
		pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", g.name, i), ns).GPUs(g.gpus).
			SchedulerName(localcluster.SchedulerName).PodGroup(g.name).Obj()
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		if _, err := cluster.Clientset.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		return nil
	})
}

// parallel runs f(0) to f(n-1) each in its own goroutine and returns
// their errors joined.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createGangsConcurrently creates the gangs in the given order, each from
// its own goroutine, all started together.
func createGangsConcurrently(t *testing.T, ns string, gangs []gangSpec, annotations map[string]string) {
	t.Helper()
	if err := parallel(len(gangs), func(i int) error {
		return createGangE(context.Background(), ns, gangs[i], annotations)
	}); err != nil {
		t.Fatal(err)
	}
}

// deleteGangNow deletes a gang's pods at once (no grace) and its PodGroup,
// without waiting.
func deleteGangNow(ctx context.Context, ns, gang string) error {
	err := cluster.Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: schedv1alpha1.PodGroupLabel + "=" + gang})
	if err != nil {
		return err
	}
	return cluster.Client.Delete(ctx, utiltesting.MakePodGroup(gang, ns, 1).Obj())
}

// boundByGang counts the bound members of each gang of a namespace.
func boundByGang(ctx context.Context, ns string) (map[string]int, error) {
	pods, err := cluster.Pods(ctx, ns)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range framework.BoundPods(pods) {
		if g := p.Labels[schedv1alpha1.PodGroupLabel]; g != "" {
			out[g]++
		}
	}
	return out, nil
}

// drainingGangs returns the gangs whose unbound members' PodScheduled
// condition says the scheduler drains a domain for them.
func drainingGangs(ctx context.Context, ns string) (map[string]bool, error) {
	pods, err := cluster.Pods(ctx, ns)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range pods {
		g := pods[i].Labels[schedv1alpha1.PodGroupLabel]
		if c := podScheduledCondition(&pods[i]); g != "" && pods[i].Spec.NodeName == "" && c != nil && strings.Contains(c.Message, "; draining ") {
			out[g] = true
		}
	}
	return out, nil
}

// TestCompetingGangsStress: 20 rounds (E2E_STRESS_ROUNDS) of three or four
// gangs of random sizes (seeded per round), created concurrently in random
// order, competing for the one leaf left free (8 nodes; the three others
// are filled) with more demand than it holds. Whenever the scheduler
// settles, every gang is either bound whole or holds no pod, and no waiting
// gang would fit what is free (else it is a deadlock) unless another
// waiting gang drains the leaf; the running gangs
// are then deleted and the waiting ones must run, until every gang has run.
// At the end the plugin's books are empty.
func TestCompetingGangsStress(t *testing.T) {
	rounds := envInt("E2E_STRESS_ROUNDS", 20)
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	var full []string
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		full = append(full, leaves[leaf]...)
	}
	fill(t, ns, "full", 8, full)
	waitRunningAllocated(t, ns, len(full))
	free := len(leaves["leaf-0"])
	begin := time.Now()
	settles := 0
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 42))
		n := 3 + rng.IntN(2)
		gangs := make([]gangSpec, n)
		demand := 0
		for i := range gangs {
			gangs[i] = gangSpec{name: fmt.Sprintf("r%d-g%d", round, i), members: 2 + rng.IntN(5), gpus: 8}
			demand += gangs[i].members
		}
		for demand <= free { // the round must oversubscribe the leaf
			gangs[0].members++
			demand++
		}
		rng.Shuffle(len(gangs), func(i, j int) { gangs[i], gangs[j] = gangs[j], gangs[i] })
		createGangsConcurrently(t, ns, gangs, nil)

		pending := map[string]gangSpec{}
		for _, g := range gangs {
			pending[g.name] = g
		}
		var order []string
		for len(pending) > 0 {
			running := settle(t, ns, pending, free)
			settles++
			checkGPUs(t)
			if t.Failed() {
				t.FailNow()
			}
			for _, g := range running {
				deleteGang(t, ns, g)
				delete(pending, g)
			}
			order = append(order, strings.Join(running, "+"))
		}
		sizes := make([]string, len(gangs))
		for i, g := range gangs {
			sizes[i] = fmt.Sprintf("%s:%d", g.name, g.members)
		}
		t.Logf("round %d: created %s (%d nodes asked of %d); ran %s", round, strings.Join(sizes, " "), demand, free, strings.Join(order, ", then "))
	}
	t.Logf("%d rounds, %d settled states checked, in %s", rounds, settles, time.Since(begin).Round(time.Second))
	waitBooksEmpty(t)
}

// settle waits until the pending gangs settle: each bound whole or not at
// all, at least one running, and every waiting one larger than the free
// nodes left (all members of 8 GPUs, free nodes in all) unless a waiting
// gang drains the leaf: then the leaf's free nodes are its own, and a
// smaller gang that would fit them waits too. A gang left part bound, or a
// waiting gang that fits but is not placed while no gang drains, fails
// the test after a minute. It returns the running gangs.
func settle(t *testing.T, ns string, pending map[string]gangSpec, free int) []string {
	t.Helper()
	var running []string
	var state string
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "gangs settled whole or waiting", func(ctx context.Context) (bool, error) {
		bound, err := boundByGang(ctx, ns)
		if err != nil {
			return false, nil
		}
		draining, err := drainingGangs(ctx, ns)
		if err != nil {
			return false, nil
		}
		running = running[:0]
		left := free
		var parts []string
		settled := true
		for name, g := range pending {
			parts = append(parts, fmt.Sprintf("%s %d/%d", name, bound[name], g.members))
			switch bound[name] {
			case g.members:
				running = append(running, name)
				left -= g.members
			case 0:
			default:
				settled = false
			}
		}
		sort.Strings(parts)
		state = strings.Join(parts, ", ")
		if !settled || len(running) == 0 {
			return false, nil
		}
		for name := range pending {
			if bound[name] == 0 && draining[name] {
				return true, nil // the leaf's free nodes are held for it
			}
		}
		for name, g := range pending {
			if bound[name] == 0 && g.members <= left {
				return false, nil // it fits: the scheduler must still place it
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v: %s", err, state)
	}
	sort.Strings(running)
	return running
}

// TestSoakPodNodeEvents drives 10,000 pod and node events (E2E_SOAK_EVENTS)
// through the scheduler as fast as the cluster takes them: gangs of 1 to 4
// pods of 1 to 8 GPUs are created six at a time and deleted two cycles
// later, placed or not, while nodes are cordoned and uncordoned. The events
// counted are those the scheduler's informers get: every watch event of the
// test's pods (added, bound, running, deleted) and every node write. Then
// the last gangs must end bound whole with no GPU bound twice, and once
// they are gone the plugin's books are empty.
func TestSoakPodNodeEvents(t *testing.T) {
	target := envInt("E2E_SOAK_EVENTS", 10000)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(10000, 5))
	nodes := cluster.Model.Nodes()
	podEvents := countPodEvents(t, ns)
	// Preferred on the one spine: a gang is placed anywhere in it at once,
	// and no gang waits out preferredWait for a leaf (a Required level is
	// a cap below which gangs are placed tightest first).
	spine := map[string]string{lockstep.AnnotationTopologyLevel: "spine", lockstep.AnnotationTopologyMode: "Preferred"}
	cordoned := map[string]bool{}
	t.Cleanup(func() {
		for name := range cordoned {
			_ = cordon(context.Background(), name, false)
		}
	})
	gpuChoices := []int64{1, 2, 4, 8}
	nodeEvents, cycles, pods := 0, 0, 0
	var cycleGangs [][]gangSpec
	begin := time.Now()
	for podEvents.Load()+int64(nodeEvents) < int64(target) {
		gangs := make([]gangSpec, 6)
		for i := range gangs {
			gangs[i] = gangSpec{name: fmt.Sprintf("s%d-%d", cycles, i), members: 1 + rng.IntN(4), gpus: gpuChoices[rng.IntN(len(gpuChoices))]}
			pods += gangs[i].members
		}
		var old []gangSpec
		if len(cycleGangs) >= 2 {
			old, cycleGangs = cycleGangs[0], cycleGangs[1:]
		}
		cycleGangs = append(cycleGangs, gangs)
		// This cycle's gangs arrive while those of two cycles ago leave.
		err := parallel(len(gangs)+len(old), func(i int) error {
			if i < len(gangs) {
				return createGangE(ctx, ns, gangs[i], spine)
			}
			return deleteGangNow(ctx, ns, old[i-len(gangs)].name)
		})
		if err != nil {
			t.Fatal(err)
		}
		node := nodes[rng.IntN(len(nodes))].Name
		if err := cordon(ctx, node, !cordoned[node]); err != nil {
			t.Fatal(err)
		}
		if cordoned[node] {
			delete(cordoned, node)
		} else {
			cordoned[node] = true
		}
		nodeEvents++
		if len(cordoned) > 3 { // keep most of the cluster schedulable
			for name := range cordoned {
				if err := cordon(ctx, name, false); err != nil {
					t.Fatal(err)
				}
				delete(cordoned, name)
				nodeEvents++
				break
			}
		}
		cycles++
		if cycles%50 == 0 {
			checkGPUs(t)
			t.Logf("%d pod and %d node events in %d cycles, %s", podEvents.Load(), nodeEvents, cycles, time.Since(begin).Round(time.Second))
		}
	}
	driven := time.Since(begin)
	events := podEvents.Load() + int64(nodeEvents)
	for name := range cordoned {
		if err := cordon(ctx, name, false); err != nil {
			t.Fatal(err)
		}
		delete(cordoned, name)
	}
	// The last two cycles' gangs must all end bound whole: the seed fixes
	// their sizes, well within the cluster.
	var last []gangSpec
	for _, gs := range cycleGangs {
		last = append(last, gs...)
	}
	for _, g := range last {
		waitGangBound(t, ns, g.name, g.members, 2*time.Minute)
	}
	checkGPUs(t)
	for _, g := range last {
		if err := deleteGangNow(ctx, ns, g.name); err != nil {
			t.Fatal(err)
		}
	}
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "soak pods gone", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pod and node events (%d pods in %d gangs) driven in %s (%.0f/s); the last %d gangs ran whole",
		events, pods, cycles*6, driven.Round(time.Second), float64(events)/driven.Seconds(), len(last))
	waitBooksEmpty(t)
}

// countPodEvents counts the watch events of the pods of a namespace until
// the test ends.
func countPodEvents(t *testing.T, ns string) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// A watch the apiserver ends (its timeout, a stream reset under load)
	// is resumed from the last event seen: with a plain watch the count
	// stopped and the soak ran on cordons alone until the suite's timeout.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return cluster.Clientset.CoreV1().Pods(ns).Watch(ctx, options)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Error {
				n.Add(1)
			}
		}
	}()
	return &n
}

// cordon marks a node unschedulable, or schedulable again.
func cordon(ctx context.Context, node string, unschedulable bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	_, err := cluster.Clientset.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("cordoning %s (%t): %w", node, unschedulable, err)
	}
	return nil
}
