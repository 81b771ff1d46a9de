package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// Priorities of the preemption tests' classes.
const (
	lowPriority  = 100
	highPriority = 1000
)

// priorityClass creates the PriorityClass ns-name, removed when the test
// ends, and returns its name. never sets preemptionPolicy: Never.
func priorityClass(t *testing.T, ns, name string, value int32, never bool) string {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Value: value}
	if never {
		pc.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	}
	if err := cluster.Client.Create(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), pc) })
	waitPriorityClassAdmitted(t, ns, pc.Name)
	return pc.Name
}

// waitPriorityClassAdmitted waits until the apiserver admits a pod of class
// in ns (a dry run): its Priority admission plugin reads classes from an
// informer, and refuses a pod naming a class created a moment before
// ("no PriorityClass with name ... was found"), as a user applying both at
// once can see.
func waitPriorityClassAdmitted(t *testing.T, ns, class string) {
	t.Helper()
	probe := utiltesting.MakePod("priority-class-probe", ns).Obj()
	probe.Spec.PriorityClassName = class
	var last error
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, "PriorityClass "+class+" admitted", func(ctx context.Context) (bool, error) {
		_, last = cluster.Clientset.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, last)
	}
}

// checkpointingJob is a PyTorch gang of 1 + workers pods of gpus GPUs in
// class, constrained to one leaf when leaf is set. Its pods take their
// whole 10 s grace period to go once deleted (the harness's default), as
// trainers that checkpoint on SIGTERM and are killed at the deadline do,
// so a preemptor must wait for them.
func checkpointingJob(ns, name string, workers int32, gpus int64, class string, leaf bool) *v1alpha1.TrainingJob {
	tpl := utiltesting.MakePodTemplate("pytorch").CPU("1").GPULimit(gpus).Obj()
	tpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	w := pytorchGang(ns, name, workers, tpl).PriorityClass(class)
	if leaf {
		w = w.Topology(lockstep.LevelLeaf, v1alpha1.TopologyRequired)
	}
	return w.Obj()
}

// podUIDs are a job's pods by name.
func podUIDs(pods map[string]corev1.Pod) map[string]types.UID {
	out := map[string]types.UID{}
	for name, p := range pods {
		out[name] = p.UID
	}
	return out
}

// checkUntouched fails the test if any pod of want is gone, replaced or
// being deleted.
func checkUntouched(t *testing.T, ns, job string, want map[string]types.UID) {
	t.Helper()
	pods, err := cluster.Clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + job})
	if err != nil {
		t.Fatal(err)
	}
	checkPodsUntouched(t, "job "+job, pods.Items, want)
}

// checkPodsUntouched fails the test if a pod of want is not among pods
// (gone or replaced) or is being deleted; what names whose pods they are.
func checkPodsUntouched(t *testing.T, what string, pods []corev1.Pod, want map[string]types.UID) {
	t.Helper()
	have := map[string]corev1.Pod{}
	for _, p := range pods {
		have[p.Name] = p
	}
	for name, uid := range want {
		p, ok := have[name]
		switch {
		case !ok || p.UID != uid:
			t.Errorf("%s lost pod %s", what, name)
		case p.DeletionTimestamp != nil:
			t.Errorf("%s: pod %s is being deleted", what, name)
		}
	}
}

// waitPreempted waits until every pod of want is being deleted or gone,
// checking that each it still sees carries the scheduler's DisruptionTarget
// condition naming preemptor and priority, and returns when the last went.
func waitPreempted(t *testing.T, ns string, want map[string]types.UID, preemptor string, priority int32) time.Time {
	t.Helper()
	checked := map[types.UID]bool{}
	err := localcluster.Poll(context.Background(), 50*time.Millisecond, 2*time.Minute, "victim pods gone", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		if err != nil {
			return false, nil
		}
		alive := 0
		for _, p := range pods {
			if !slices.Contains(slices.Collect(maps.Values(want)), p.UID) {
				continue
			}
			alive++
			_, c := podutil.GetPodConditionFromList(p.Status.Conditions, corev1.DisruptionTarget)
			if c == nil || checked[p.UID] {
				continue
			}
			checked[p.UID] = true
			got, ok := lockstep.ParsePreemption(c.Message)
			if c.Reason != corev1.PodReasonPreemptionByScheduler || !ok || got.Preemptor != preemptor || got.Priority != priority {
				t.Errorf("victim %s: DisruptionTarget %s %q, want a preemption by %s at priority %d", p.Name, c.Reason, c.Message, preemptor, priority)
			}
		}
		return alive == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(checked) == 0 {
		t.Errorf("saw no victim pod with a DisruptionTarget condition")
	}
	return time.Now()
}

// preempted is the victim job's state once the controller has seen its
// preemption: counted once, not as a failure, with the preemptor named.
func preempted(preemptor string, priority int32) func(*v1alpha1.TrainingJob) bool {
	return func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionPreempted)
		return j.Status.Preemptions == 1 && c != nil && c.Status == metav1.ConditionTrue &&
			strings.Contains(c.Message, preemptor) && strings.Contains(c.Message, fmt.Sprint(priority))
	}
}

// TestPreemptionDisplacesOneWholeGang: four low-priority 8 x 8-GPU jobs fill
// the four leaves, started one after another. A high-priority 4 x 8-GPU
// leaf:Required job displaces exactly one of them, the youngest (least work
// lost), whole; it runs in that leaf once the victims have gone, and the
// other three never lose a pod. The victim's restart is counted as a
// preemption, not against its backoffLimit of 0, and its new pods wait:
// the freed leaf is held for the preemptor.
func TestPreemptionDisplacesOneWholeGang(t *testing.T) {
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	before, youngest := fillLeaves(t, ns, func(name string) *v1alpha1.TrainingJob {
		job := checkpointingJob(ns, name, 7, 8, low, true)
		job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](0)
		return job
	})
	victimLeaf := oneLeaf(t, youngest)

	createJob(t, checkpointingJob(ns, "high", 3, 8, high, true))
	gone := waitPreempted(t, ns, before["low-3"], ns+"/high", highPriority)
	running := waitPods(t, ns, "high", 4, time.Minute)
	t.Logf("high running whole %s after its victims went", time.Since(gone).Round(100*time.Millisecond))
	if leaf := oneLeaf(t, running); leaf != victimLeaf {
		t.Errorf("high runs in %s, its victim ran in %s", leaf, victimLeaf)
	}
	leafOf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leafOf[n.Name] = n.Labels[leafLabel]
	}
	for _, i := range []int{0, 1, 2} {
		checkUntouched(t, ns, fmt.Sprintf("low-%d", i), before[fmt.Sprintf("low-%d", i)])
	}
	victim := waitJob(t, ns, "low-3", time.Minute, "low-3 preempted", preempted(ns+"/high", highPriority))
	if hasCondition(v1alpha1.JobFailed, "")(victim) {
		t.Errorf("victim failed: a preemption counted against backoffLimit 0")
	}
	if err := waitEvent(ns, "TrainingJob", "low-3", controller.ReasonPreempted, ""); err != nil {
		t.Error(err)
	}
	// The member whose scheduling cycle evicted says so.
	events, err := cluster.Clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.Reason == "Preempting" && e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.InvolvedObject.Name, "high-") && strings.Contains(e.Message, ns+"/low-3")
	}) {
		t.Errorf("no Preempting event on a member of high naming %s/low-3", ns)
	}
	// The victim's new pods wait: nothing of its priority enters the leaf
	// held for the preemptor, and there is no room elsewhere.
	pods, err := cluster.Pods(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Labels[lockstep.LabelJobName] == "low-3" && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			t.Errorf("restarted victim pod %s bound to %s (%s)", p.Name, p.Spec.NodeName, leafOf[p.Spec.NodeName])
		}
	}
}

// fillLeaves creates the 8-pod jobs low-0 to low-3 of job, one after
// another, each running before the next starts, so that they fill the four
// leaves and the last is the youngest. It returns their pods' UIDs by job
// and the youngest job's pods.
func fillLeaves(t *testing.T, ns string, job func(name string) *v1alpha1.TrainingJob) (map[string]map[string]types.UID, map[string]corev1.Pod) {
	t.Helper()
	before := map[string]map[string]types.UID{}
	var youngest map[string]corev1.Pod
	for i := range 4 {
		name := fmt.Sprintf("low-%d", i)
		createJob(t, job(name))
		youngest = waitPods(t, ns, name, 8, 2*time.Minute)
		before[name] = podUIDs(youngest)
		// Start times have a resolution of a second: the next job
		// starts in a later one, so the ages differ.
		waitPastStart(t, youngest)
	}
	return before, youngest
}

// TestPreemptionPicksTheCheapestVictim: with the rest of the cluster held by
// work of the preemptor's own priority, a one-pod 8-GPU high-priority job
// may displace either a 64-GPU or an 8-GPU low-priority job; it takes the
// 8-GPU one, though that one started first.
func TestPreemptionPicksTheCheapestVictim(t *testing.T) {
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	createJob(t, checkpointingJob(ns, "small", 0, 8, low, false))
	smallPods := waitPods(t, ns, "small", 1, time.Minute)
	small := podUIDs(smallPods)
	waitPastStart(t, smallPods)
	createJob(t, checkpointingJob(ns, "big", 7, 8, low, true))
	big := podUIDs(waitPods(t, ns, "big", 8, 2*time.Minute))
	fillRest(t, ns, high)

	createJob(t, checkpointingJob(ns, "urgent", 0, 8, high, false))
	waitPreempted(t, ns, small, ns+"/urgent", highPriority)
	waitPods(t, ns, "urgent", 1, time.Minute)
	waitJob(t, ns, "small", time.Minute, "small preempted", preempted(ns+"/urgent", highPriority))
	checkUntouched(t, ns, "big", big)
}

// waitPastStart waits until the wall clock is past the second after the
// latest start time of pods, the resolution of a pod's status.startTime:
// pods started from now on are seen as younger.
func waitPastStart(t *testing.T, pods map[string]corev1.Pod) {
	t.Helper()
	var latest time.Time
	for _, p := range pods {
		if p.Status.StartTime != nil && p.Status.StartTime.After(latest) {
			latest = p.Status.StartTime.Time
		}
	}
	err := localcluster.Poll(context.Background(), 50*time.Millisecond, 10*time.Second, "a second past the pods' start", func(context.Context) (bool, error) {
		return time.Now().After(latest.Add(time.Second)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fillRest pins an 8-GPU pod of class to every node with 8 GPUs free, and
// waits until they run: the cluster is then full.
func fillRest(t *testing.T, ns, class string) {
	t.Helper()
	used := map[string]bool{}
	pods, err := cluster.Pods(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		used[p.Spec.NodeName] = true
	}
	n := 0
	for _, node := range cluster.Model.Nodes() {
		if used[node.Name] {
			continue
		}
		pod := utiltesting.MakePod(fmt.Sprintf("filler-%d", n), ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node.Name}
		pod.Spec.PriorityClassName = class
		cluster.CreatePods(t, pod)
		n++
	}
	waitRunningAllocated(t, ns, len(pods)+n)
}

// waitUnschedulable waits until some pod of job has its PodScheduled
// condition False with a message containing every want (members are attempted in
// turn; the one attempted before its siblings existed keeps the older
// message until it is tried again), and returns the message.
func waitUnschedulable(t *testing.T, ns, job string, want ...string) string {
	t.Helper()
	return waitPodsUnschedulable(t, job, func(ctx context.Context) ([]corev1.Pod, error) {
		pods, err := jobPodsOf(ctx, ns, job)
		return slices.Collect(maps.Values(pods)), err
	}, want...)
}

// waitPodsUnschedulable is waitUnschedulable for the pods list returns,
// which what names.
func waitPodsUnschedulable(t *testing.T, what string, list func(context.Context) ([]corev1.Pod, error), want ...string) string {
	t.Helper()
	var msgs []string
	var found string
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, time.Minute, what+" unschedulable: "+strings.Join(want, ", "), func(ctx context.Context) (bool, error) {
		pods, err := list(ctx)
		if err != nil {
			return false, nil
		}
		msgs = msgs[:0]
		for _, p := range pods {
			if _, c := podutil.GetPodConditionFromList(p.Status.Conditions, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
				msgs = append(msgs, c.Message)
				if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(c.Message, w) }) {
					found = c.Message
				}
			}
		}
		return found != "", nil
	})
	if err != nil {
		t.Fatalf("%v; messages %q", err, msgs)
	}
	return found
}

// TestPreemptionEvictsNothingThatCannotHelp: a low-priority 4 x 8-GPU job
// holds half of one leaf and work of high priority holds the rest of the
// cluster. A high-priority 5 x 8-GPU leaf:Required job could not fit even
// with the low job gone, so nothing is evicted; a 4 x 8-GPU one whose
// PriorityClass says preemptionPolicy: Never would fit, and evicts nothing
// either.
func TestPreemptionEvictsNothingThatCannotHelp(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	never := priorityClass(t, ns, "never", highPriority, true)
	createJob(t, checkpointingJob(ns, "low", 3, 8, low, true))
	lowPods := podUIDs(waitPods(t, ns, "low", 4, time.Minute))
	fillRest(t, ns, high)

	createJob(t, checkpointingJob(ns, "wide", 4, 8, high, true))
	t.Logf("wide: %s", waitUnschedulable(t, ns, "wide", "resource gap", "would not make room"))
	checkUntouched(t, ns, "low", lowPods)
	if err := cluster.Client.Delete(ctx, &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wide"}}); err != nil {
		t.Fatal(err)
	}

	createJob(t, checkpointingJob(ns, "polite", 3, 8, never, true))
	t.Logf("polite: %s", waitUnschedulable(t, ns, "polite", "resource gap", "preemptionPolicy is Never"))
	checkUntouched(t, ns, "low", lowPods)
}

// TestCompetingPreemptorsEvictEachVictimOnce: in 20 seeded rounds, eight
// low-priority TrainingJobs of 4 x 8 GPUs fill the cluster (two to a leaf)
// and two to four higher-priority leaf:Required gangs (3 or 4 members of
// 8 GPUs, equal or different priorities) arrive at once, with the
// harness's node-critical DaemonSet on every node and the agent reporting
// allocations on its resync interval. Each preemptor needs exactly one low
// job's room (two cannot share one), so: every preemptor runs (no
// deadlock); low jobs are evicted whole, exactly as many as there are
// preemptors; no victim pod is preempted for two preemptors; and the sum of
// the low jobs' status.preemptions equals the number of preemptors, each
// victim counting its preemption once.
func TestCompetingPreemptorsEvictEachVictimOnce(t *testing.T) {
	const rounds = 20
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 26))
		ns := cluster.NewNamespace(t)
		classes := []string{
			priorityClass(t, ns, "low", lowPriority, false),
			priorityClass(t, ns, "mid", 500, false),
			priorityClass(t, ns, "high", highPriority, false),
		}
		lows := make([]string, 8)
		for i := range lows {
			lows[i] = fmt.Sprintf("low-%d", i)
			tpl := utiltesting.MakePodTemplate("pytorch").CPU("1").GPULimit(8).Obj()
			// Victims take their whole grace period to go: short, for
			// twenty rounds.
			tpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
			createJob(t, pytorchGang(ns, lows[i], 3, tpl).PriorityClass(classes[0]).Topology(lockstep.LevelLeaf, v1alpha1.TopologyRequired).Obj())
		}
		waitRunningAllocated(t, ns, 32)
		before := map[string]map[string]types.UID{}
		for _, name := range lows {
			pods, err := jobPodsOf(context.Background(), ns, name)
			if err != nil {
				t.Fatal(err)
			}
			before[name] = podUIDs(pods)
		}

		preemptors := 2 + rng.IntN(3)
		type want struct {
			name    string
			members int
		}
		var gangs []want
		for i := range preemptors {
			g := want{name: fmt.Sprintf("pre-%d", i), members: 3 + rng.IntN(2)}
			gangs = append(gangs, g)
			pg := utiltesting.MakePodGroup(g.name, ns, int32(g.members)).Obj()
			pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: lockstep.LevelLeaf, lockstep.AnnotationTopologyMode: string(lockstep.Required)}
			if err := cluster.Client.Create(context.Background(), pg); err != nil {
				t.Fatal(err)
			}
		}
		var pods []*corev1.Pod
		for i, g := range gangs {
			class := classes[1+rng.IntN(2)]
			for m := range g.members {
				pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", g.name, m), ns).GPUs(8).SchedulerName(localcluster.SchedulerName).PodGroup(gangs[i].name).Obj()
				pod.Spec.PriorityClassName = class
				pods = append(pods, pod)
			}
		}
		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		cluster.CreatePods(t, pods...)
		for _, g := range gangs {
			waitGangBound(t, ns, g.name, g.members, 2*time.Minute)
		}

		// The low jobs that lost pods, and the Preempted events of each
		// victim pod. A job's restarted pods have new UIDs.
		var evicted []string
		for _, name := range lows {
			now, err := jobPodsOf(context.Background(), ns, name)
			if err != nil {
				t.Fatal(err)
			}
			kept := 0
			for pod, uid := range before[name] {
				if p, ok := now[pod]; ok && p.UID == uid {
					kept++
				}
			}
			switch kept {
			case 4:
			case 0:
				evicted = append(evicted, name)
				for _, pod := range slices.Sorted(maps.Keys(before[name])) {
					if by := victimEventPreemptors(t, ns, pod); len(by) != 1 {
						t.Errorf("round %d: victim pod %s preempted for %v, want one preemptor", round, pod, by)
					}
				}
			default:
				t.Errorf("round %d: job %s lost %d of its 4 pods: evicted in part", round, name, 4-kept)
			}
		}
		if len(evicted) != preemptors {
			t.Errorf("round %d: low jobs %v evicted for %d preemptors; want one each", round, evicted, preemptors)
		}
		// Each victim counts its preemption once, once the controller has
		// seen it; the jobs spared count none.
		for _, name := range evicted {
			waitJob(t, ns, name, time.Minute, name+" counts its preemption", func(j *v1alpha1.TrainingJob) bool { return j.Status.Preemptions > 0 })
		}
		var jobs v1alpha1.TrainingJobList
		if err := cluster.Client.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		sum := int32(0)
		for _, j := range jobs.Items {
			sum += j.Status.Preemptions
			want := int32(0)
			if slices.Contains(evicted, j.Name) {
				want = 1
			}
			if j.Status.Preemptions != want {
				t.Errorf("round %d: job %s status.preemptions %d, want %d", round, j.Name, j.Status.Preemptions, want)
			}
		}
		if sum != int32(preemptors) {
			t.Errorf("round %d: low jobs' status.preemptions sum to %d for %d preemptors", round, sum, preemptors)
		}
		deleteJobs(t, ns)
		deletePods(t, ns)
	}
}

// deleteJobs deletes every TrainingJob of ns and waits until they are gone,
// so that nothing recreates the pods deletePods then deletes.
func deleteJobs(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.Client.DeleteAllOf(ctx, &v1alpha1.TrainingJob{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "TrainingJobs of "+ns+" gone", func(ctx context.Context) (bool, error) {
		var jobs v1alpha1.TrainingJobList
		return cluster.Client.List(ctx, &jobs, client.InNamespace(ns)) == nil && len(jobs.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// victimEventPreemptors waits until a Preempted event of victim pod in ns
// names a preemptor, for at most 30 s, and returns every preemptor its
// events name. The scheduler sends events asynchronously, off the
// scheduling thread and after the eviction: on a loaded machine they reach
// the apiserver after the preemptor is bound.
func victimEventPreemptors(t *testing.T, ns, pod string) []string {
	t.Helper()
	var by []string
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, 30*time.Second, "a Preempted event on "+pod, func(ctx context.Context) (bool, error) {
		events, err := cluster.Events(ctx, ns, "Pod", pod)
		if err != nil {
			return false, err
		}
		by = preemptorsNamed(events)
		return len(by) > 0, nil
	})
	if err != nil {
		t.Logf("%v", err)
	}
	return by
}

// preemptorsNamed returns the preemptors the Preempted events name, sorted
// and each once: a pod evicted for two preemptors names both.
func preemptorsNamed(events []corev1.Event) []string {
	var out []string
	for _, e := range events {
		if p, ok := lockstep.ParsePreemption(e.Message); e.Reason == "Preempted" && ok && !slices.Contains(out, p.Preemptor) {
			out = append(out, p.Preemptor)
		}
	}
	slices.Sort(out)
	return out
}

// deletePods deletes every pod of ns at once and waits until they are gone.
func deletePods(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "pods of "+ns+" gone", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Pods(ctx, ns)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMissingPriorityClassIsReported: a job naming a PriorityClass that
// does not exist gets Scheduled=False with reason PriorityClassNotFound
// naming the field, and no pods (no silent default); once the class is
// created, the job runs without anyone touching it.
func TestMissingPriorityClassIsReported(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	class := ns + "-late"
	createJob(t, pytorchGang(ns, "late", 1, gpuTemplate("pytorch", 1).Obj()).PriorityClass(class).Obj())
	job := waitJob(t, ns, "late", time.Minute, "PriorityClassNotFound", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonPriorityClassNotFound
	})
	if msg := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionScheduled).Message; !strings.Contains(msg, "spec.runPolicy.schedulingPolicy.priorityClass") || !strings.Contains(msg, class) {
		t.Errorf("condition message %q does not name the field and the class", msg)
	}
	if pods, err := jobPodsOf(context.Background(), ns, "late"); err != nil || len(pods) != 0 {
		t.Errorf("%d pods (%v) before the class exists, want none", len(pods), err)
	}
	if err := waitEvent(ns, "TrainingJob", "late", controller.ReasonPriorityClassNotFound, ""); err != nil {
		t.Error(err)
	}
	priorityClass(t, ns, "late", lowPriority, false)
	waitPods(t, ns, "late", 2, time.Minute)
}
