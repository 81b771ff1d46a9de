package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// observer watches the benchmark's pods and records, for each job, when its
// pods were bound, to which node and GPUs, and when they finished.
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

	mu   sync.Mutex
	jobs map[string]*jobState
	// lastProgress is the last submission, bind or finish.
	lastProgress time.Time
	// releases queues jobs whose gang is complete, for the release workers.
	releases chan string
	// releaseErr is the first failure to release a gang.
	releaseErr error
}

type jobState struct {
	job       bench.Job
	submitted time.Time
	pods      map[string]*podState
	released  bool
	// slowdown is the runtime model's factor at release.
	slowdown float64
}

type podState struct {
	uid      types.UID
	node     string
	gpus     topology.GPUSet
	bound    time.Time
	running  bool
	finished time.Time
}

// newObserver watches namespace for up to jobs jobs. Each job is queued
// for release at most once, so the queue never blocks the pod handler.
func newObserver(clientset kubernetes.Interface, c client.Client, namespace string, jobs int, rendezvous bool, runtime *bench.RuntimeModel) *observer {
	return &observer{
		clientset:  clientset,
		client:     c,
		namespace:  namespace,
		rendezvous: rendezvous,
		runtime:    runtime,
		jobs:       map[string]*jobState{},
		releases:   make(chan string, jobs),
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
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.onPod(obj) },
		UpdateFunc: func(_, obj any) { o.onPod(obj) },
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
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
	o.jobs[j.ID] = &jobState{job: j, submitted: at, pods: map[string]*podState{}}
	o.lastProgress = at
}

func (o *observer) onPod(obj any) {
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
	ps := js.pods[pod.Name]
	if ps == nil || ps.uid != pod.UID {
		// A pod replaced under the same name starts over.
		ps = &podState{uid: pod.UID}
		js.pods[pod.Name] = ps
	}
	if pod.Spec.NodeName != "" && ps.bound.IsZero() {
		ps.bound, ps.node = now, pod.Spec.NodeName
		o.lastProgress = now
	}
	if s, ok := pod.Annotations[lockstep.AnnotationGPUs]; ok && ps.gpus == 0 {
		// Unparsable annotations leave the set unknown; the agent's
		// allocation may still fill it in.
		ps.gpus, _ = topology.ParseGPUList(s)
	}
	ps.running = pod.Status.Phase == corev1.PodRunning
	if (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && ps.finished.IsZero() {
		ps.finished = now
		o.lastProgress = now
	}
	if o.rendezvous && !js.released && o.gangRunning(js) {
		js.released = true
		o.releases <- js.job.ID
	}
}

// gangRunning reports whether every pod of the job exists and runs.
func (o *observer) gangRunning(js *jobState) bool {
	if len(js.pods) < js.job.Replicas {
		return false
	}
	for _, ps := range js.pods {
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
		case id := <-o.releases:
			runtime, err := o.placedRuntime(ctx, id)
			if err != nil {
				if ctx.Err() == nil {
					o.fail(fmt.Errorf("job %s: simulated runtime: %w", id, err))
				}
				continue
			}
			o.mu.Lock()
			js := o.jobs[id]
			names := make([]string, 0, len(js.pods))
			for name := range js.pods {
				names = append(names, name)
			}
			o.mu.Unlock()
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
				lockstep.AnnotationSimulatedRuntime: runtime.String(),
			}}})
			if err != nil {
				o.fail(err)
				continue
			}
			// KWOK counts each pod's runtime from its own patch, and the
			// job ends with its last pod: patching a 32-pod gang one pod at
			// a time would add the sum of the patches' latencies to its
			// runtime, minutes of trace time on a loaded machine.
			slices.Sort(names)
			var wg sync.WaitGroup
			sem := make(chan struct{}, releasePatchParallelism)
			for _, name := range names {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					_, err := o.clientset.CoreV1().Pods(o.namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
					if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
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

// placedRuntime returns the simulated runtime of job id, whose gang is
// whole, from the nodes and GPUs its pods hold, and records the slowdown.
func (o *observer) placedRuntime(ctx context.Context, id string) (time.Duration, error) {
	pods := func() (bench.Job, []bench.PodRun) {
		o.mu.Lock()
		defer o.mu.Unlock()
		js := o.jobs[id]
		var pods []bench.PodRun
		for _, n := range slices.Sorted(maps.Keys(js.pods)) {
			ps := js.pods[n]
			pods = append(pods, bench.PodRun{Name: n, Node: ps.node, GPUs: ps.gpus, Bound: ps.bound})
		}
		return js.job, pods
	}
	job, placed := pods()
	if o.runtime == nil {
		return job.Duration, nil
	}
	deadline := time.Now().Add(gpuSetWait)
	for {
		runtime, slowdown, err := o.runtime.Runtime(job, placed)
		if errors.Is(err, bench.ErrUnmodelled) && time.Now().Before(deadline) && !o.wholeNodes(job, placed) {
			if err := o.fillGPUs(ctx, o.client); err != nil {
				return 0, err
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			job, placed = pods()
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
			return 0, err
		}
		o.mu.Lock()
		o.jobs[id].slowdown = slowdown
		o.mu.Unlock()
		return runtime, nil
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
// stock scheduler and Coscheduling pick no GPUs) from the allocations the
// topology agent publishes, as the device plugin made them.
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
		for _, ps := range js.pods {
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
		for _, ps := range js.pods {
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
	lastProgress       time.Time
	releaseErr         error
}

// finishedAt is when the job's last pod finished, zero until every pod of
// the job exists and has finished.
func (js *jobState) finishedAt() time.Time {
	if len(js.pods) < js.job.Replicas {
		return time.Time{}
	}
	var last time.Time
	for _, ps := range js.pods {
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
		for _, ps := range js.pods {
			if ps.finished.IsZero() && !ps.bound.IsZero() {
				p.busyGPUs += js.job.GPUsPerReplica
			}
		}
		switch {
		case !js.finishedAt().IsZero():
			p.finished++
		case js.released:
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
		jr := bench.JobRun{Job: js.job, Submitted: js.submitted, Finished: js.finishedAt(), Slowdown: js.slowdown}
		for _, n := range slices.Sorted(maps.Keys(js.pods)) {
			ps := js.pods[n]
			jr.Pods = append(jr.Pods, bench.PodRun{Name: n, Node: ps.node, GPUs: ps.gpus, Bound: ps.bound, Finished: ps.finished})
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
