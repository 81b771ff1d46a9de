package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// observer watches the benchmark's pods and records, for each job, when its
// pods were bound, to which node and GPUs, and when they finished.
//
// A job may run more than once: when the scheduler preempts a pod of a gang
// (deletes it with a DisruptionTarget condition of reason
// PreemptionByScheduler), the controller restarts the whole gang, deleting
// the other pods and creating them all again under the same names with the
// next incarnation label. The observer keeps each incarnation as a run of
// its own: the job finishes with its last run, and the earlier ones are
// what preemption cost (bench.EarlierRun).
//
// It also plays the training processes' rendezvous: a pod's simulated run
// starts only once every pod of its gang is running, as ranks block in
// init_process_group until the world is complete. A gang placed in part
// holds its GPUs and never finishes, which is what a half-placed job does on
// a real cluster. A released gang runs its trace duration slowed by its
// placement (bench.RuntimeModel).
type observer struct {
	clientset kubernetes.Interface
	// client lists NodeTopologies for the device plugin's GPU assignments.
	client    client.Client
	namespace string
	// rendezvous releases complete gangs; without it pods run until the
	// cluster goes (the scale run only measures binding).
	rendezvous bool
	// runtime gives a released gang's simulated runtime; nil runs the trace
	// duration (the scale run's pods never get one).
	runtime *bench.RuntimeModel
	// claimedGPUs takes every pod's GPUs from the allocations the agent
	// derives from its allocated ResourceClaims, never from the
	// scheduler's lockstep.dev/gpus: with DRA that annotation is the plan,
	// and the allocator, not the plan, chose the devices the pod got.
	claimedGPUs bool

	mu   sync.Mutex
	jobs map[string]*jobState
	// podJob is the job of each pod name seen, for naming a preemptor's
	// job; pods keep their names across a job's runs.
	podJob map[string]string
	// eventPreemptor is the preemptor each victim pod's Preempted event
	// names (its related object, upstream's and Lockstep's alike), by the
	// victim's UID: upstream's DisruptionTarget message names nobody.
	eventPreemptor map[types.UID]string
	// lastProgress is the last submission, bind, finish or deletion.
	lastProgress time.Time
	// releases queues runs whose gang is complete, for the release
	// workers; done closes with the context start was given.
	releases chan release
	done     <-chan struct{}
	// releaseErr is the first failure to release a gang.
	releaseErr error
}

type jobState struct {
	job       bench.Job
	submitted time.Time
	// runs are the job's incarnations in order; the last is current.
	runs []*runState
	// slowdown is the runtime model's factor at the last release.
	slowdown float64
}

// runState is one incarnation of a job: the pods of one gang.
type runState struct {
	incarnation int
	pods        map[string]*podState
	released    bool
}

type podState struct {
	uid      types.UID
	node     string
	gpus     topology.GPUSet
	bound    time.Time
	running  bool
	finished time.Time
	// deleted is when the pod was first seen deleting or gone.
	deleted time.Time
	// preempted says the pod was deleted while it held its GPUs, by
	// preemption; preemptor is who took its place, when Lockstep says.
	preempted bool
	preemptor string
}

// release is a complete gang to start: a job's run.
type release struct {
	job         string
	incarnation int
}

// current returns the job's current run.
func (js *jobState) current() *runState { return js.runs[len(js.runs)-1] }

// run returns the job's run of incarnation inc, adding it when it is newer
// than the current one; nil for an older incarnation never seen.
func (js *jobState) run(inc int) *runState {
	if cur := js.current(); inc > cur.incarnation {
		js.runs = append(js.runs, &runState{incarnation: inc, pods: map[string]*podState{}})
		return js.current()
	}
	for _, r := range js.runs {
		if r.incarnation == inc {
			return r
		}
	}
	return nil
}

// holdsGPUs reports whether the pod is bound and has neither ended nor been
// deleted.
func (ps *podState) holdsGPUs() bool {
	return !ps.bound.IsZero() && ps.finished.IsZero() && ps.deleted.IsZero()
}

// newObserver watches namespace for up to jobs jobs. Each job is queued
// for release at most once, so the queue never blocks the pod handler.
func newObserver(clientset kubernetes.Interface, c client.Client, namespace string, jobs int, rendezvous bool, runtime *bench.RuntimeModel) *observer {
	return &observer{
		clientset:      clientset,
		client:         c,
		namespace:      namespace,
		rendezvous:     rendezvous,
		runtime:        runtime,
		jobs:           map[string]*jobState{},
		podJob:         map[string]string{},
		eventPreemptor: map[types.UID]string{},
		releases:       make(chan release, jobs),
	}
}

// releaseWorkers release gangs in parallel; each patches its gang's pods
// releasePatchParallelism at a time.
const releaseWorkers = 4

// start watches the namespace's pods and starts the release workers. Both
// stop with ctx.
func (o *observer) start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(o.clientset, 0, informers.WithNamespace(o.namespace))
	pods := factory.Core().V1().Pods().Informer()
	o.done = ctx.Done()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { o.onPod(obj, false) },
		DeleteFunc: func(obj any) { o.onPod(obj, true) },
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	events := factory.Events().V1().Events().Informer()
	if _, err := events.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    o.onEvent,
		UpdateFunc: func(_, obj any) { o.onEvent(obj) },
	}); err != nil {
		return fmt.Errorf("watching events: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, events.HasSynced) {
		return fmt.Errorf("pod and event informers did not sync: %w", ctx.Err())
	}
	if o.rendezvous {
		for range releaseWorkers {
			go o.releaseLoop(ctx)
		}
	}
	return nil
}

// submitted records a job just before its TrainingJob is created, so that
// its pods' events find it.
func (o *observer) submitted(j bench.Job, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.jobs[j.ID] = &jobState{job: j, submitted: at, runs: []*runState{{pods: map[string]*podState{}}}}
	o.lastProgress = at
}

// onPod records a pod's add, update or, when gone, deletion.
func (o *observer) onPod(obj any, gone bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	js := o.jobs[pod.Labels[lockstep.LabelJobName]]
	if js == nil {
		return
	}
	o.podJob[pod.Name] = js.job.ID
	// A pod without a readable incarnation is the first run's, as the
	// controller labels every pod it creates.
	inc, _ := strconv.Atoi(pod.Labels[lockstep.LabelIncarnation])
	run := js.run(inc)
	if run == nil {
		return
	}
	ps := run.pods[pod.Name]
	if ps == nil || ps.uid != pod.UID {
		if gone {
			return
		}
		// A pod replaced under the same name starts over.
		ps = &podState{uid: pod.UID}
		run.pods[pod.Name] = ps
	}
	if pod.Spec.NodeName != "" && ps.bound.IsZero() {
		ps.bound, ps.node = now, pod.Spec.NodeName
		o.lastProgress = now
	}
	if s, ok := pod.Annotations[lockstep.AnnotationGPUs]; ok && ps.gpus == 0 && !o.claimedGPUs {
		// Unparsable annotations leave the set unknown; the agent's
		// allocation may still fill it in.
		ps.gpus, _ = topology.ParseGPUList(s)
	}
	if (gone || pod.DeletionTimestamp != nil) && ps.deleted.IsZero() {
		if ps.holdsGPUs() {
			o.lastProgress = now
		}
		ps.deleted = now
	}
	if !ps.preempted && !ps.deleted.IsZero() && ps.finished.IsZero() && !ps.bound.IsZero() {
		// Deleted while it held its GPUs. The scheduler writes the
		// condition before it deletes; each later event of the pod is read
		// again, should one show them the other way round.
		ps.preempted, ps.preemptor = preemptedBy(pod)
	}
	ps.running = pod.Status.Phase == corev1.PodRunning && ps.deleted.IsZero()
	if (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && ps.finished.IsZero() && ps.deleted.IsZero() {
		ps.finished = now
		o.lastProgress = now
	}
	if o.rendezvous && run == js.current() && !run.released && run.gangRunning(js.job) {
		run.released = true
		o.queueRelease(release{job: js.job.ID, incarnation: run.incarnation})
	}
}

// queueRelease queues r without blocking the pod handler: a job is queued
// once per run, and a job preempted and restarted while its release is
// still queued may overflow the queue's room of one per job.
func (o *observer) queueRelease(r release) {
	select {
	case o.releases <- r:
	default:
		go func() {
			select {
			case o.releases <- r:
			case <-o.done:
			}
		}()
	}
}

// onEvent records the preemptor a victim's Preempted event names: the
// event's related pod (upstream's DefaultPreemption and Lockstep both set
// it), else the preemptor of Lockstep's message.
func (o *observer) onEvent(obj any) {
	e, ok := obj.(*eventsv1.Event)
	if !ok || e.Reason != gangpreemption.EventPreempted || e.Regarding.Kind != "Pod" {
		return
	}
	preemptor := ""
	if e.Related != nil && e.Related.Kind == "Pod" {
		preemptor = e.Related.Namespace + "/" + e.Related.Name
	} else if p, ok := lockstep.ParsePreemption(e.Note); ok {
		preemptor = p.Preemptor
	}
	if preemptor == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.eventPreemptor[e.Regarding.UID]; !ok {
		o.eventPreemptor[e.Regarding.UID] = preemptor
	}
}

// preemptorJob returns the job of a preemptor named "namespace/name": a
// gang's PodGroup, named as its job, or a pod of a job; "" when neither is
// the benchmark's.
func (o *observer) preemptorJob(preemptor string) string {
	_, name, _ := strings.Cut(preemptor, "/")
	if _, ok := o.jobs[name]; ok {
		return name
	}
	return o.podJob[name]
}

// preemptedBy reports whether the scheduler preempted pod: a
// DisruptionTarget condition of reason PreemptionByScheduler, which
// upstream's DefaultPreemption and Lockstep both write before deleting a
// victim; preemptor is who took its place when Lockstep's message says.
func preemptedBy(pod *corev1.Pod) (preempted bool, preemptor string) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
			p, _ := lockstep.ParsePreemption(c.Message)
			return true, p.Preemptor
		}
	}
	return false, ""
}

// gangRunning reports whether every pod of job exists in the run and runs.
func (r *runState) gangRunning(job bench.Job) bool {
	if len(r.pods) < job.Replicas {
		return false
	}
	for _, ps := range r.pods {
		if !ps.running {
			return false
		}
	}
	return true
}

// releaseLoop starts the simulated run of complete gangs: each pod gets the
// job's runtime on its placement as its simulated runtime, after which KWOK
// ends it.
func (o *observer) releaseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rel := <-o.releases:
			id := rel.job
			runtime, ok, err := o.placedRuntime(ctx, rel)
			if err != nil {
				if ctx.Err() == nil {
					o.fail(fmt.Errorf("job %s: simulated runtime: %w", id, err))
				}
				continue
			}
			if !ok {
				// Preempted before its release: the next run is released
				// in its turn.
				continue
			}
			o.mu.Lock()
			run := o.jobs[id].current()
			uids := map[string]types.UID{}
			for name, ps := range run.pods {
				uids[name] = ps.uid
			}
			stale := run.incarnation != rel.incarnation
			o.mu.Unlock()
			if stale {
				continue
			}
			names := slices.Collect(maps.Keys(uids))
			// KWOK counts each pod's runtime from its own patch, and the
			// job ends with its last pod: patching a 32-pod gang one pod at
			// a time would add the sum of the patches' latencies to its
			// runtime, minutes of trace time on a loaded machine.
			slices.Sort(names)
			var wg sync.WaitGroup
			sem := make(chan struct{}, releasePatchParallelism)
			for _, name := range names {
				// The UID makes the patch conditional: a pod of the next
				// run under the same name is not released with this one.
				patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
					"uid":         uids[name],
					"annotations": map[string]string{lockstep.AnnotationSimulatedRuntime: runtime.String()},
				}})
				if err != nil {
					o.fail(err)
					break
				}
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					_, err := o.clientset.CoreV1().Pods(o.namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
					if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
						o.fail(fmt.Errorf("releasing pod %s/%s of job %s: %w", o.namespace, name, id, err))
					}
				}()
			}
			wg.Wait()
		}
	}
}

// releasePatchParallelism is how many pods of one gang are patched at once.
const releasePatchParallelism = 16

// gpuSetWait bounds how long a release waits for the topology agent to
// publish the device plugin's GPU assignment of a gang's pods (the stock
// scheduler and Coscheduling choose no GPUs themselves). The agent follows
// pod binds, so the assignment is usually there when the gang runs; the
// wait delays the gang's start, so it is kept short.
const gpuSetWait = time.Second

// placedRuntime returns the simulated runtime of the released run, whose
// gang is whole, from the nodes and GPUs its pods hold, and records the
// slowdown; ok is false when the run is no longer the job's current one.
func (o *observer) placedRuntime(ctx context.Context, rel release) (runtime time.Duration, ok bool, err error) {
	pods := func() (bench.Job, []bench.PodRun, bool) {
		o.mu.Lock()
		defer o.mu.Unlock()
		js := o.jobs[rel.job]
		run := js.current()
		var pods []bench.PodRun
		for _, n := range slices.Sorted(maps.Keys(run.pods)) {
			ps := run.pods[n]
			pods = append(pods, bench.PodRun{Name: n, Node: ps.node, GPUs: ps.gpus, Bound: ps.bound})
		}
		return js.job, pods, run.incarnation == rel.incarnation
	}
	job, placed, ok := pods()
	if !ok {
		return 0, false, nil
	}
	if o.runtime == nil {
		return job.Duration, true, nil
	}
	deadline := time.Now().Add(gpuSetWait)
	for {
		runtime, slowdown, err := o.runtime.Runtime(job, placed)
		if errors.Is(err, bench.ErrUnmodelled) && time.Now().Before(deadline) && !o.wholeNodes(job, placed) {
			if err := o.fillGPUs(ctx, o.client); err != nil {
				return 0, false, err
			}
			select {
			case <-ctx.Done():
				return 0, false, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if job, placed, ok = pods(); !ok {
				return 0, false, nil
			}
			continue
		}
		if errors.Is(err, bench.ErrUnmodelled) {
			// The assignment was not published in time, or need not be
			// (whole-node pods): take each pod's first GPUs. On NVSwitch
			// nodes every set of a size rates the same; the summary rates
			// the placement again from the assignment published by then.
			for i := range placed {
				if placed[i].GPUs == 0 {
					placed[i].GPUs = topology.AllGPUs(job.GPUsPerReplica)
				}
			}
			runtime, slowdown, err = o.runtime.Runtime(job, placed)
		}
		if err != nil {
			return 0, false, err
		}
		o.mu.Lock()
		o.jobs[rel.job].slowdown = slowdown
		o.mu.Unlock()
		return runtime, true, nil
	}
}

// wholeNodes reports whether every pod of the job whose GPU set is unknown
// takes all of its node's GPUs, so the set is known without the agent.
func (o *observer) wholeNodes(job bench.Job, pods []bench.PodRun) bool {
	for _, p := range pods {
		if p.GPUs == 0 && job.GPUsPerReplica != o.runtime.NodeGPUs(p.Node) {
			return false
		}
	}
	return true
}

func (o *observer) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.releaseErr == nil {
		o.releaseErr = err
	}
}

// fillGPUs takes the GPU sets of pods the scheduler did not annotate (the
// stock scheduler and Coscheduling pick no GPUs), and with claimedGPUs of
// every pod, from the allocations the topology agent publishes, as the
// device plugin made them or as the pods' claims were allocated.
func (o *observer) fillGPUs(ctx context.Context, c client.Client) error {
	list := &v1alpha1.NodeTopologyList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing NodeTopologies: %w", err)
	}
	byUID := map[types.UID]topology.GPUSet{}
	for _, nt := range list.Items {
		for _, a := range nt.Status.Allocations {
			if a.Namespace != o.namespace {
				continue
			}
			var set topology.GPUSet
			for _, i := range a.GPUs {
				set |= topology.NewGPUSet(int(i))
			}
			byUID[types.UID(a.PodUID)] = set
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, js := range o.jobs {
		for _, ps := range js.current().pods {
			if ps.gpus == 0 && !ps.bound.IsZero() {
				ps.gpus = byUID[ps.uid]
			}
		}
	}
	return nil
}

// bindTimes returns when each bound pod was bound, and how many pods
// exist.
func (o *observer) bindTimes() (binds []time.Time, pods int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, js := range o.jobs {
		for _, ps := range js.current().pods {
			pods++
			if !ps.bound.IsZero() {
				binds = append(binds, ps.bound)
			}
		}
	}
	return binds, pods
}

// progress summarizes the replay for the progress line and the stop rules.
type progress struct {
	submitted, finished, running, waiting int
	// busyGPUs are held by bound pods that have not finished.
	busyGPUs int
	// releasedUnfinished counts complete gangs still running: while there
	// are any, something will change.
	releasedUnfinished int
	// evictedPods are the pods preempted so far.
	evictedPods  int
	lastProgress time.Time
	releaseErr   error
}

// finishedAt is when the job's last pod finished, zero until every pod of
// the job's current run exists and has finished.
func (js *jobState) finishedAt() time.Time {
	pods := js.current().pods
	if len(pods) < js.job.Replicas {
		return time.Time{}
	}
	var last time.Time
	for _, ps := range pods {
		if ps.finished.IsZero() {
			return time.Time{}
		}
		if ps.finished.After(last) {
			last = ps.finished
		}
	}
	return last
}

func (o *observer) progress() progress {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := progress{submitted: len(o.jobs), lastProgress: o.lastProgress, releaseErr: o.releaseErr}
	for _, js := range o.jobs {
		for _, run := range js.runs {
			for _, ps := range run.pods {
				if ps.holdsGPUs() {
					p.busyGPUs += js.job.GPUsPerReplica
				}
				if ps.preempted {
					p.evictedPods++
				}
			}
		}
		switch {
		case !js.finishedAt().IsZero():
			p.finished++
		case js.current().released:
			p.running++
			p.releasedUnfinished++
		default:
			p.waiting++
		}
	}
	return p
}

// run returns what was observed as the benchmark's record of the replay.
func (o *observer) run(name string, start, end time.Time, samples []bench.Sample) bench.Run {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := bench.Run{Scheduler: name, Start: start, End: end, Utilization: samples}
	for _, js := range o.jobs {
		jr := bench.JobRun{Job: js.job, Submitted: js.submitted, Finished: js.finishedAt(), Slowdown: js.slowdown,
			Pods: js.current().podRuns()}
		for _, run := range js.runs[:len(js.runs)-1] {
			if len(run.pods) > 0 {
				jr.EarlierRuns = append(jr.EarlierRuns, o.earlierRun(run))
			}
		}
		r.Jobs = append(r.Jobs, jr)
	}
	slices.SortFunc(r.Jobs, func(a, b bench.JobRun) int {
		if c := a.Submitted.Compare(b.Submitted); c != 0 {
			return c
		}
		return strings.Compare(a.Job.ID, b.Job.ID)
	})
	return r
}

// podRuns returns the run's pods by name; a pod stops holding its GPUs
// when it ends or is deleted, whichever comes first.
func (r *runState) podRuns() []bench.PodRun {
	var out []bench.PodRun
	for _, n := range slices.Sorted(maps.Keys(r.pods)) {
		ps := r.pods[n]
		end := ps.finished
		if end.IsZero() || (!ps.deleted.IsZero() && ps.deleted.Before(end)) {
			end = ps.deleted
		}
		out = append(out, bench.PodRun{Name: n, Node: ps.node, GPUs: ps.gpus, Bound: ps.bound, Finished: end})
	}
	return out
}

// earlierRun is run r as one the job restarted after: its pods, the pods
// preemption took, when it took the first and for which job. The caller
// holds o.mu.
func (o *observer) earlierRun(r *runState) bench.EarlierRun {
	er := bench.EarlierRun{Pods: r.podRuns()}
	for _, n := range slices.Sorted(maps.Keys(r.pods)) {
		ps := r.pods[n]
		if !ps.preempted {
			continue
		}
		er.EvictedPods++
		if er.Evicted.IsZero() || ps.deleted.Before(er.Evicted) {
			er.Evicted = ps.deleted
		}
		if er.Preemptor == "" {
			er.Preemptor = o.preemptorJob(ps.preemptor)
		}
		if er.Preemptor == "" {
			er.Preemptor = o.preemptorJob(o.eventPreemptor[ps.uid])
		}
	}
	return er
}
