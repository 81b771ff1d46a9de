package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// envInt reads a positive count from the environment, def otherwise.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// replicaSet is a component run as several leader-electing replicas in place
// of the suite's single one.
type replicaSet struct {
	names    []string
	describe func(name string) (localcluster.Component, error)
}

// runReplicas stops the suite's single component and starts the replicas;
// when the test ends they are killed and the single one is started again.
func runReplicas(t *testing.T, single string, restore func() (localcluster.Component, error), rs replicaSet) {
	t.Helper()
	if err := cluster.KillComponent(single); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range rs.names {
			_ = cluster.KillComponent(name) // killed ones are not running
		}
		comp, err := restore()
		if err == nil {
			_, err = cluster.StartComponent(context.Background(), comp)
		}
		if err != nil {
			t.Errorf("restoring %s: %v", single, err)
		}
	})
	for _, name := range rs.names {
		if err := rs.start(name); err != nil {
			t.Fatal(err)
		}
	}
}

func (rs replicaSet) start(name string) error {
	comp, err := rs.describe(name)
	if err != nil {
		return err
	}
	_, err = cluster.StartComponent(context.Background(), comp)
	return err
}

// restartAsync starts a killed replica again in the background; the
// returned func waits for it.
func (rs replicaSet) restartAsync(name string) func() error {
	done := make(chan error, 1)
	go func() { done <- rs.start(name) }()
	return func() error { return <-done }
}

// restartExited starts again the replicas that exited by themselves, as a
// leader that could not renew its lease in time does; it returns how many.
func (rs replicaSet) restartExited(t *testing.T) int {
	t.Helper()
	n := 0
	for _, name := range rs.names {
		if cluster.Forget(name) {
			t.Logf("%s had exited by itself; starting it again", name)
			if err := rs.start(name); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// leader waits for one replica to lead and returns it.
func (rs replicaSet) leader(t *testing.T) string {
	t.Helper()
	leader, err := cluster.WaitLeader(context.Background(), time.Minute, rs.names...)
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// checkGPUs checks every bound, unfinished pod in the cluster against its
// node: no GPU index is given to two pods, every index exists on the node,
// each pod got as many as it asked for, every gang member got its indices,
// and no node gives out more GPUs than it has.
func checkGPUs(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	nodes, err := cluster.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int64{}
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[lockstep.GPUResource]
		capacity[n.Name] = q.Value()
	}
	pods, err := cluster.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]map[int]string{}
	used := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var want int64
		for _, c := range p.Spec.Containers {
			q := c.Resources.Requests[lockstep.GPUResource]
			if l, ok := c.Resources.Limits[lockstep.GPUResource]; ok && q.IsZero() {
				q = l
			}
			want += q.Value()
		}
		node := p.Spec.NodeName
		used[node] += want
		list, has := p.Annotations[lockstep.AnnotationGPUs]
		if !has {
			// Pods outside gangs on a node whose NodeTopology the scheduler
			// has not seen are left to the device plugin's choice; only the
			// count above applies to them. Gang members are always given
			// their GPUs.
			if want > 0 && p.Labels[schedv1alpha1.PodGroupLabel] != "" {
				t.Errorf("gang member %s/%s on %s asks for %d GPUs but has no %s", p.Namespace, p.Name, node, want, lockstep.AnnotationGPUs)
			}
			continue
		}
		set, err := topology.ParseGPUList(list)
		if err != nil || int64(set.Len()) != want {
			t.Errorf("pod %s/%s: %s=%q, want %d GPUs (%v)", p.Namespace, p.Name, lockstep.AnnotationGPUs, list, want, err)
			continue
		}
		if owner[node] == nil {
			owner[node] = map[int]string{}
		}
		for _, i := range set.Indices() {
			if int64(i) >= capacity[node] {
				t.Errorf("pod %s/%s got GPU %d on %s, which has %d", p.Namespace, p.Name, i, node, capacity[node])
			}
			if other, taken := owner[node][i]; taken {
				t.Errorf("GPU %d of %s bound twice: to %s and %s/%s", i, node, other, p.Namespace, p.Name)
			}
			owner[node][i] = p.Namespace + "/" + p.Name
		}
	}
	for node, n := range used {
		if n > capacity[node] {
			t.Errorf("node %s gives out %d GPUs of %d", node, n, capacity[node])
		}
	}
}

// gangBound returns how many members of a gang are bound.
func gangBound(ctx context.Context, ns, gang string) (int, error) {
	pods, err := gangPods(ctx, ns, gang)
	if err != nil {
		return 0, err
	}
	return len(framework.BoundPods(pods)), nil
}

// waitFirstBound waits until a member of the gang is bound, watching, so
// that it returns while the others are still being bound.
func waitFirstBound(t *testing.T, ns, gang string, create func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := cluster.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: schedv1alpha1.PodGroupLabel + "=" + gang})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	create()
	for ev := range w.ResultChan() {
		if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return
		}
	}
	t.Fatalf("no member of gang %s bound: %v", gang, ctx.Err())
}

// TestSchedulerFailover runs two lockstep-scheduler replicas with leader
// election and kills the leader with SIGKILL 20 times (E2E_FAILOVER_KILLS),
// each time right after the first member of a gang was bound, while the
// others are still being bound; a second gang arrives while no replica
// leads. The standby takes over: both gangs end bound whole, no GPU is
// bound twice, and the killed replica rejoins as the standby.
func TestSchedulerFailover(t *testing.T) {
	kills := envInt("E2E_FAILOVER_KILLS", 20)
	le := framework.FastLeaderElection()
	rs := replicaSet{names: []string{"scheduler-a", "scheduler-b"}, describe: func(name string) (localcluster.Component, error) {
		return cluster.SchedulerReplicaComponent(name, le)
	}}
	runReplicas(t, "scheduler", cluster.SchedulerComponent, rs)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(12, 4))
	nodes := cluster.Model.NodeCount()
	begin := time.Now()
	partial, selfExits := 0, 0
	var takeovers []time.Duration
	for kill := range kills {
		selfExits += rs.restartExited(t)
		leader := rs.leader(t)
		// A gang of 8-GPU members on 10 to 20 of the 32 nodes.
		big, bigN := fmt.Sprintf("big%d", kill), 10+rng.IntN(11)
		waitFirstBound(t, ns, big, func() { createGang(t, ns, big, bigN, 8, nil) })
		if err := cluster.KillComponent(leader); err != nil {
			t.Fatal(err)
		}
		killedAt := time.Now()
		bound, err := gangBound(ctx, ns, big)
		if err != nil {
			t.Fatal(err)
		}
		if bound < bigN {
			partial++
		}
		// A gang of 4-GPU members arrives while no replica leads, asking for
		// at most what the first leaves free.
		small, smallN := fmt.Sprintf("small%d", kill), 2+rng.IntN(2*(nodes-bigN)-3)
		createGang(t, ns, small, smallN, 4, map[string]string{
			lockstep.AnnotationTopologyLevel: "spine",
			lockstep.AnnotationTopologyMode:  "Required",
		})
		restarted := rs.restartAsync(leader)
		waitGangBound(t, ns, big, bigN, 2*time.Minute)
		waitGangBound(t, ns, small, smallN, 2*time.Minute)
		placed := time.Since(killedAt)
		takeovers = append(takeovers, placed)
		checkGPUs(t)
		if err := restarted(); err != nil {
			t.Fatalf("restarting %s: %v", leader, err)
		}
		now, _ := cluster.Leader(ctx, rs.names...)
		t.Logf("kill %d: %s killed with %d of %d members of %s bound; %s (%d members) arrived leaderless; both whole %s after the kill; leader now %s",
			kill, leader, bound, bigN, big, small, smallN, placed.Round(100*time.Millisecond), now)
		deleteGang(t, ns, big)
		deleteGang(t, ns, small)
	}
	var worst time.Duration
	for _, d := range takeovers {
		worst = max(worst, d)
	}
	t.Logf("%d kills in %s: %d hit a partly bound gang; %d replicas exited by themselves; slowest kill-to-both-gangs-whole %s (lease %s)",
		kills, time.Since(begin).Round(time.Second), partial, selfExits, worst.Round(100*time.Millisecond), le.LeaseDuration)
	waitBooksEmpty(t, rs.names...)
}

// TestControllerFailover runs two TrainingJob controller replicas with
// leader election and kills the leader 20 times (E2E_FAILOVER_KILLS), each
// right after a member of a running job was deleted: on even kills once
// the restart is recorded, on odd ones before the controller has seen the
// loss. Every fifth kill a new job arrives while no replica leads. Every
// restart is counted exactly once, every gang is recreated once per
// restart (one UID per pod name and incarnation), and every job runs whole.
func TestControllerFailover(t *testing.T) {
	kills := envInt("E2E_FAILOVER_KILLS", 20)
	le := framework.FastLeaderElection()
	rs := replicaSet{names: []string{"controller-a", "controller-b"}, describe: func(name string) (localcluster.Component, error) {
		return cluster.ControllerReplicaComponent(name, le)
	}}
	runReplicas(t, "controller", cluster.ControllerComponent, rs)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	uids := watchPodUIDs(t, ns)
	rng := rand.New(rand.NewPCG(12, 5))

	ranks := map[string]int{}
	var jobs []string
	addJob := func(workers int32) string {
		name := fmt.Sprintf("fo%d", len(jobs))
		job := pytorchJob(ns, name, workers)
		// Every kill restarts a job again within seconds: the test is about
		// counting each restart once across failovers, not about spacing
		// them (TestCrashLoopingRankBacksOff), so restarts come back after
		// a second and are not limited.
		job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](1000)
		job.Spec.RunPolicy.RestartBackoff = &v1alpha1.RestartBackoff{InitialSeconds: ptr.To[int32](1), MaxSeconds: ptr.To[int32](1)}
		createJob(t, job)
		jobs = append(jobs, name)
		ranks[name] = int(workers) + 1
		return name
	}
	for w := range int32(3) {
		addJob(w + 1)
	}
	for _, j := range jobs {
		waitPods(t, ns, j, ranks[j], time.Minute)
	}
	begin := time.Now()
	incidents := map[string]int{}
	selfExits := 0
	for kill := range kills {
		selfExits += rs.restartExited(t)
		leader := rs.leader(t)
		job := jobs[kill%len(jobs)]
		before := waitPods(t, ns, job, ranks[job], time.Minute)
		// The worker's name in the job's current incarnation.
		victim, err := memberPod(ctx, ns, fmt.Sprintf("%s-worker-%d", job, rng.IntN(ranks[job]-1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		incidents[job]++
		recorded := kill%2 == 0
		if recorded {
			waitJob(t, ns, job, 30*time.Second, "restart recorded", func(j *v1alpha1.TrainingJob) bool {
				return j.Status.RestartCount >= int32(incidents[job])
			})
		}
		if err := cluster.KillComponent(leader); err != nil {
			t.Fatal(err)
		}
		killedAt := time.Now()
		arrived := ""
		if kill%5 == 4 {
			arrived = addJob(int32(1 + rng.IntN(3)))
		}
		restarted := rs.restartAsync(leader)
		waitGangReplaced(t, ns, job, ranks[job], before, strconv.Itoa(incidents[job]))
		final := waitJob(t, ns, job, time.Minute, "job Running again", func(j *v1alpha1.TrainingJob) bool {
			return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
		})
		if got := int(final.Status.RestartCount); got != incidents[job] {
			t.Errorf("kill %d: %s restartCount = %d after %d lost members, want %d", kill, job, got, incidents[job], incidents[job])
		}
		if arrived != "" {
			waitPods(t, ns, arrived, ranks[arrived], time.Minute)
		}
		if err := restarted(); err != nil {
			t.Fatalf("restarting %s: %v", leader, err)
		}
		t.Logf("kill %d: %s killed after %s lost %s (restart recorded first: %v); gang %d recreated and Running %s after the kill%s",
			kill, leader, job, victim.Name, recorded, incidents[job], time.Since(killedAt).Round(100*time.Millisecond),
			map[bool]string{true: "; job " + arrived + " arrived leaderless and runs", false: ""}[arrived != ""])
	}
	for _, j := range jobs {
		final := waitJob(t, ns, j, time.Minute, "job Running", hasCondition(v1alpha1.JobRunning, ""))
		if got := int(final.Status.RestartCount); got != incidents[j] {
			t.Errorf("%s: restartCount = %d, want %d", j, got, incidents[j])
		}
		pods := waitPods(t, ns, j, ranks[j], time.Minute)
		for _, p := range pods {
			if p.Labels[lockstep.LabelIncarnation] != strconv.Itoa(incidents[j]) {
				t.Errorf("%s: pod %s of incarnation %s, want %d", j, p.Name, p.Labels[lockstep.LabelIncarnation], incidents[j])
			}
		}
	}
	created := uids.check(t)
	t.Logf("%d kills in %s over %d jobs; %d pods created, one per name and incarnation; %d replicas exited by themselves",
		kills, time.Since(begin).Round(time.Second), len(jobs), created, selfExits)
}

// podUIDWatch records the UIDs each pod name had per incarnation, and when
// each was created: from a watch, since pods of a crash loop live for a
// second and a poll could miss them.
type podUIDWatch struct {
	mu     sync.Mutex
	seen   map[string]map[types.UID]time.Time
	closed bool
}

// podKey is podUIDWatch's key: a pod name in one incarnation.
func podKey(name, incarnation string) string { return name + " incarnation " + incarnation }

func watchPodUIDs(t *testing.T, ns string) *podUIDWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cluster.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pw := &podUIDWatch{seen: map[string]map[types.UID]time.Time{}}
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); w.Stop(); <-stopped })
	go func() {
		defer close(stopped)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			key := podKey(p.Name, p.Labels[lockstep.LabelIncarnation])
			pw.mu.Lock()
			if pw.seen[key] == nil {
				pw.seen[key] = map[types.UID]time.Time{}
			}
			pw.seen[key][p.UID] = p.CreationTimestamp.Time
			pw.mu.Unlock()
		}
		pw.mu.Lock()
		pw.closed = ctx.Err() == nil
		pw.mu.Unlock()
	}()
	return pw
}

// earliest is when the first pod of an incarnation was created.
func (pw *podUIDWatch) earliest(incarnation int32) (time.Time, bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var first time.Time
	suffix := podKey("", strconv.Itoa(int(incarnation)))
	for key, set := range pw.seen {
		if !strings.HasSuffix(key, suffix) {
			continue
		}
		for _, c := range set {
			if first.IsZero() || c.Before(first) {
				first = c
			}
		}
	}
	return first, !first.IsZero()
}

// check fails the test for every pod name created more than once in one
// incarnation, and returns how many pods were created.
func (pw *podUIDWatch) check(t *testing.T) int {
	t.Helper()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.closed {
		t.Error("the pod watch ended early: pods may have gone unseen")
	}
	n := 0
	for key, set := range pw.seen {
		n += len(set)
		if len(set) > 1 {
			t.Errorf("pod %s created %d times", key, len(set))
		}
	}
	return n
}

// waitBooksEmpty waits until the scheduler (or the replica that leads)
// holds no plan and no GPU in its books.
func waitBooksEmpty(t *testing.T, replicas ...string) {
	t.Helper()
	var held, gpus float64
	var from string
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, 2*time.Minute, "the scheduler's books empty", func(ctx context.Context) (bool, error) {
		from = "scheduler"
		if len(replicas) > 0 {
			leader, err := cluster.Leader(ctx, replicas...)
			if err != nil || leader == "" {
				return false, nil
			}
			from = leader
		}
		s, err := cluster.Scrape(ctx, from)
		if err != nil {
			return false, nil
		}
		held = s.Find("lockstep_scheduler_plans_held", nil).Sum()
		gpus = s.Find("lockstep_scheduler_held_gpus", nil).Sum()
		return held == 0 && gpus == 0, nil
	})
	if err != nil {
		t.Errorf("%v: %s holds %v plans and %v GPUs", err, from, held, gpus)
	}
}
