package gangpreemption

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	apipod "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/clock"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Reasons of the events gang preemption records: EventPreempted on each
// victim pod (upstream's DefaultPreemption uses the same reason),
// EventPreempting on the member of the preemptor whose cycle evicted them.
const (
	EventPreempted  = "Preempted"
	EventPreempting = "Preempting"
	// EventHoldExpired is on the preemptor's PodGroup when its hold is
	// released with victims still terminating past the hold's bound.
	EventHoldExpired = "PreemptionHoldExpired"
)

// evictionWorkers bounds the victim pods written at once, over every
// victim of every preemption (Evictor.each): a 64-pod gang's status
// patches and deletes go out in a few rounds, not 128 requests at once
// against the API server's priority-and-fairness share of the scheduler.
const evictionWorkers = 16

// Evictor evicts the victims of a preemption. One serves a scheduler:
// it keeps the victims waiting out a notice (Heard) until they are
// evicted.
type Evictor struct {
	Client   kubernetes.Interface
	Recorder events.EventRecorder
	Clock    clock.WithDelayedExecution
	// NotGoing is told of a victim that is not going, or went before it
	// could be evicted, so that the hold stops waiting for it.
	NotGoing func(ctx context.Context, victim *v1.Pod)
	// Failed counts an eviction the API server refused.
	Failed func()
	// Lost is told the GPU time each victim lost (placement.Victim's
	// LostWorkNoticed) when its pods are deleted.
	Lost func(gpuSeconds float64)

	mu sync.Mutex
	// noticed are the victims waiting out a notice, by their pods' UIDs.
	noticed map[types.UID]*notice
	// writing holds a token per victim pod being written (each).
	writing     chan struct{}
	writingOnce sync.Once
}

// each runs write for every pod, at most evictionWorkers at once across
// the evictor, and returns when all are done.
func (e *Evictor) each(pods []*v1.Pod, write func(*v1.Pod)) {
	e.writingOnce.Do(func() { e.writing = make(chan struct{}, evictionWorkers) })
	var wg sync.WaitGroup
	for _, pod := range pods {
		e.writing <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-e.writing; wg.Done() }()
			write(pod)
		}()
	}
	wg.Wait()
}

// Victim is one victim of a preemption: a gang's live pods or a single
// pod, and what placement.Preempt knew of it (Work), which its lost work
// at eviction is measured from.
type Victim struct {
	Work placement.Victim
	Pods []*v1.Pod
}

// Notice is the notice the victim's job asked for: the longest of its
// pods' (lockstep.NoticeOf).
func (v Victim) Notice() time.Duration {
	longest := time.Duration(0)
	for _, pod := range v.Pods {
		longest = max(longest, lockstep.NoticeOf(pod.Annotations))
	}
	return longest
}

// LongestNotice is the longest notice of victims.
func LongestNotice(victims []Victim) time.Duration {
	longest := time.Duration(0)
	for _, v := range victims {
		longest = max(longest, v.Notice())
	}
	return longest
}

// Evict evicts victims for preemptor, off the scheduling thread, as by
// preemption: each pod gets a DisruptionTarget condition whose message
// (by.Message()) tells the controller who preempted it, is deleted with
// its own termination grace period (the trainer checkpoints on SIGTERM),
// and gets an event naming the preemptor and the work it lost. A victim
// whose job asked for notice (Victim.Notice) is marked, condition and
// lockstep.AnnotationPreemptionNotice, and deleted only once a rank
// reports a checkpoint that answers the notice, one of its pods goes, or
// the notice runs out (Heard). The hold waits for each victim's deletion
// event, except for a pod found gone already, whose event may have come
// before the hold, and a pod that could not be marked or deleted (logged
// and counted), which is not going: NotGoing is told of both, and once
// the hold waits for none the domain is held as a drain, which ends when
// it stops freeing GPUs.
//
// Every write is fenced by the victim's UID: TrainingJob pods keep their
// names across incarnations, and a write by name alone could evict the
// job's next incarnation.
func (e *Evictor) Evict(logger klog.Logger, preemptor *v1.Pod, victims []Victim, by lockstep.Preemption) {
	now := e.Clock.Now()
	for _, v := range victims {
		n := &notice{e: e, logger: logger, victim: v, msg: by.Message(), latest: map[types.UID]*v1.Pod{}}
		if preemptor != nil {
			n.preemptor = preemptor
		}
		if d := v.Notice(); d > 0 {
			n.notice = lockstep.Notice{By: by.Preemptor, Time: now, Deadline: now.Add(d)}
		}
		e.start(n)
	}
}

// Resume takes over the notice victim's pods were given by a scheduler
// before this one (a leader that failed over mid-notice): it waits out
// the same notice, to its deadline, and evicts them as Evict would. A
// victim whose notice ran out is evicted at once.
func (e *Evictor) Resume(logger klog.Logger, victim Victim, given lockstep.Notice, by lockstep.Preemption) {
	for _, pod := range victim.Pods {
		if e.waiting(pod.UID) {
			return
		}
	}
	n := &notice{e: e, logger: logger, victim: victim, msg: by.Message(), notice: given, marked: true, latest: map[types.UID]*v1.Pod{}}
	e.start(n)
	for _, pod := range victim.Pods {
		// Answered while no scheduler listened.
		if given.Answered(pod.Annotations, e.Clock.Now()) {
			n.due("it reported a checkpoint")
		}
	}
}

// Heard is told of every pod the scheduler's informer sees change or go
// (gone: its deletion). A victim waiting out a notice is evicted when a
// pod of it reports a checkpoint that answers the notice, or goes.
func (e *Evictor) Heard(pod *v1.Pod, gone bool) {
	e.mu.Lock()
	n := e.noticed[pod.UID]
	if n != nil && !gone {
		n.latest[pod.UID] = pod
	}
	e.mu.Unlock()
	switch {
	case n == nil:
	case gone || pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		n.due("a pod of it went")
	case n.notice.Answered(pod.Annotations, e.Clock.Now()):
		n.due("it reported a checkpoint")
	}
}

// waiting reports whether the pod of uid waits out a notice here.
func (e *Evictor) waiting(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.noticed[uid]
	return ok
}

// start carries out n: at once without notice, else marks its pods
// (unless a scheduler before this one did) and waits.
func (e *Evictor) start(n *notice) {
	if n.notice.Time.IsZero() {
		n.marked, n.why = true, "its job asked for no notice"
		go n.evict()
		return
	}
	e.mu.Lock()
	if e.noticed == nil {
		e.noticed = map[types.UID]*notice{}
	}
	for _, pod := range n.victim.Pods {
		e.noticed[pod.UID] = n
	}
	e.mu.Unlock()
	if left := n.notice.Deadline.Sub(e.Clock.Now()); left > 0 {
		timer := e.Clock.AfterFunc(left, func() { n.due("its notice ran out") })
		n.mu.Lock()
		n.timer = timer
		n.mu.Unlock()
	} else {
		n.due("its notice ran out")
	}
	if !n.marked {
		go n.mark()
	}
}

// notice is a victim waiting out its notice.
type notice struct {
	e      *Evictor
	logger klog.Logger
	// preemptor is the member whose cycle preempted, for the events; nil
	// for a notice taken over (Resume), whose message names the gang.
	preemptor runtime.Object
	victim    Victim
	msg       string
	notice    lockstep.Notice
	// latest are the victim's pods as last heard of, under the evictor's
	// mu.
	latest map[types.UID]*v1.Pod

	mu    sync.Mutex
	timer clock.Timer
	// marked is set once every pod carries the notice; why, once the
	// victim is due (evict).
	marked bool
	why    string
}

// due evicts the victim for why, once it is marked; the first reason
// counts.
func (n *notice) due(why string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.why != "" {
		return
	}
	n.why = why
	if n.marked {
		go n.evict()
	}
}

// mark gives every pod of the victim the notice: the preemption
// condition, which tells its controller who preempted it, then the
// annotation a trainer watches. A pod that could not be marked is left
// running and not waited for, as one whose eviction failed.
func (n *notice) mark() {
	ctx := klog.NewContext(context.Background(), n.logger)
	var mu sync.Mutex
	var marked []*v1.Pod
	n.e.each(n.victim.Pods, func(pod *v1.Pod) {
		if err := n.e.markPreempted(ctx, pod, n.msg); err != nil {
			n.e.notEvicted(ctx, pod, err, "Could not mark a victim of gang preemption; not deleting it")
			return
		}
		if err := patchNotice(ctx, n.e.Client, pod, n.notice); err != nil {
			n.e.notEvicted(ctx, pod, err, "Could not give a victim of gang preemption its notice; not deleting it")
			return
		}
		mu.Lock()
		defer mu.Unlock()
		marked = append(marked, pod)
	})
	n.logger.V(2).Info("Gave victims of gang preemption notice", "victim", n.victim.Work.Key, "pods", len(marked), "deadline", n.notice.Deadline)
	n.e.mu.Lock()
	for _, pod := range n.victim.Pods {
		if !slices.Contains(marked, pod) {
			delete(n.e.noticed, pod.UID)
		}
	}
	n.e.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.victim.Pods = marked
	n.marked = true
	if len(marked) == 0 {
		if n.timer != nil {
			n.timer.Stop()
		}
		n.why = "no pod could be given notice"
		return
	}
	if n.why != "" {
		go n.evict()
	}
}

// evict deletes the victim's pods, with their grace periods, and says
// what the victim lost.
func (n *notice) evict() {
	ctx := klog.NewContext(context.Background(), n.logger)
	n.mu.Lock()
	if n.timer != nil {
		n.timer.Stop()
	}
	n.mu.Unlock()
	n.e.mu.Lock()
	for _, pod := range n.victim.Pods {
		delete(n.e.noticed, pod.UID)
	}
	latest := maps.Clone(n.latest)
	n.e.mu.Unlock()
	now := n.e.Clock.Now()
	work := n.victim.Work
	for _, pod := range n.victim.Pods {
		if l, ok := latest[pod.UID]; ok {
			pod = l
		}
		readWork(&work, pod, now)
	}
	gpuSeconds := float64(work.GPUs()) * work.LostWorkNoticed(n.notice.Time, now).Seconds()
	what := fmt.Sprintf("%s; %s lost %.0f GPU-seconds of work (%s)", n.msg, n.victim.Work.Key, gpuSeconds, n.why)
	var deleted atomic.Bool
	n.e.each(n.victim.Pods, func(victim *v1.Pod) {
		if n.notice.Time.IsZero() {
			if err := n.e.markPreempted(ctx, victim, n.msg); err != nil {
				// Deleted without the condition, the controller would
				// count the restart as a failure: the pod is left running.
				n.e.notEvicted(ctx, victim, err, "Could not mark a victim of gang preemption; not deleting it")
				return
			}
		}
		err := n.e.Client.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(victim.UID))})
		if err != nil {
			n.e.notEvicted(ctx, victim, err, "Could not delete a victim of gang preemption")
			return
		}
		deleted.Store(true)
		n.logger.V(2).Info("Evicted a victim of gang preemption", "victim", klog.KObj(victim), "node", victim.Spec.NodeName, "why", n.why, "gpuSecondsLost", gpuSeconds)
		n.e.Recorder.Eventf(victim, n.preemptor, v1.EventTypeNormal, EventPreempted, "Preempting", "%s", what)
	})
	// Work is lost only where the victim went; one whose pods were all
	// gone already, or could not be deleted, is not counted here.
	if deleted.Load() && n.e.Lost != nil {
		n.e.Lost(gpuSeconds)
	}
}

// notEvicted says that victim could not be marked or deleted: err, unless
// it is gone or replaced by a pod of the same name (a new incarnation of
// its job), is logged and counted. Either way the hold stops waiting for
// it.
func (e *Evictor) notEvicted(ctx context.Context, victim *v1.Pod, err error, what string) {
	if !apierrors.IsNotFound(err) && !replaced(err) {
		klog.FromContext(ctx).Error(err, what, "victim", klog.KObj(victim))
		e.Failed()
	}
	e.NotGoing(ctx, victim)
}

// markPreempted gives victim the DisruptionTarget condition of a
// preemption, with msg (a lockstep.Preemption) as its message.
func (e *Evictor) markPreempted(ctx context.Context, victim *v1.Pod, msg string) error {
	condition := &v1.PodCondition{
		Type:               v1.DisruptionTarget,
		ObservedGeneration: apipod.CalculatePodConditionObservedGeneration(&victim.Status, victim.Generation, v1.DisruptionTarget),
		Status:             v1.ConditionTrue,
		Reason:             v1.PodReasonPreemptionByScheduler,
		Message:            msg,
	}
	status := victim.Status.DeepCopy()
	if !apipod.UpdatePodCondition(status, condition) {
		return nil
	}
	return patchVictimStatus(ctx, e.Client, victim, status)
}

// patchNotice annotates victim with n, only if the pod of that name is
// still the victim: the patch carries its UID, which the apiserver
// refuses to change.
func patchNotice(ctx context.Context, cs kubernetes.Interface, victim *v1.Pod, n lockstep.Notice) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         victim.UID,
		"annotations": map[string]string{lockstep.AnnotationPreemptionNotice: n.Format()},
	}})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// patchVictimStatus patches victim's status to status, only if the pod of
// that name is still the victim: the patch carries its UID, which the
// apiserver refuses to change.
func patchVictimStatus(ctx context.Context, cs kubernetes.Interface, victim *v1.Pod, status *v1.PodStatus) error {
	oldData, err := json.Marshal(v1.Pod{Status: victim.Status})
	if err != nil {
		return err
	}
	newData, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: victim.UID}, Status: *status})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, &v1.Pod{})
	if err != nil {
		return fmt.Errorf("patching the status of pod %s/%s: %w", victim.Namespace, victim.Name, err)
	}
	_, err = cs.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// replaced reports whether err says the pod of a name is not the one a UID
// named: a delete's UID precondition failed (Conflict), or a patch would
// have changed the immutable UID (Invalid).
func replaced(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

// LongestGrace is the longest termination grace period of pods, as the
// kubelet gives them when they are deleted with the default options: how
// long a hold may wait for its victims before a stall is counted.
func LongestGrace(pods []*v1.Pod) time.Duration {
	longest := time.Duration(0)
	for _, pod := range pods {
		longest = max(longest, gangmanager.Grace(pod))
	}
	return longest
}
