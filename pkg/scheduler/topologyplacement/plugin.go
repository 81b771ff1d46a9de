// Package topologyplacement is the TopologyPlacement scheduler plugin: it
// places a whole gang (a scheduler-plugins PodGroup) into the tightest
// topology domain that fits it before any member is reserved, and picks
// NVLink-connected GPU sets inside nodes. The placement math and the books
// of held capacity live in pkg/topology/placement (Place, Books); this
// package is the glue to the framework.
//
// Extension points, one concern each:
//   - PreFilter plans the gang (or reuses its plan), with its slots in
//     topology order (placement.RankOrder), and narrows the nodes to the
//     plan's: a member with a lockstep.dev/rank to its rank's slot; a gang
//     that fits nowhere is rejected whole, holding nothing.
//   - Filter keeps gang members on their plan's open slots and keeps other
//     GPU pods off GPUs that plans hold.
//   - Score prefers the plan's nodes, and for pods outside gangs the nodes
//     whose free GPUs give the best NVLink set.
//   - PostFilter preempts for a gang that did not fit: whole lower-priority
//     gangs and pods in the tightest domain that then fits it
//     (placement.Preempt), the domain held for it until they are gone;
//     pods outside gangs go to an embedded upstream DefaultPreemption.
//   - Reserve/Unreserve take and release plan slots.
//   - PreBind records the achieved placement on the PodGroup; Bind writes
//     the chosen GPUs, domain and rank on the pod with its Binding.
//
// It runs beside Coscheduling, whose Permit is then only a short barrier:
// capacity was checked for the whole gang at PreFilter.
package topologyplacement

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/utils/clock"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
	"github.com/lockstep-dev/lockstep/pkg/util/keyset"
)

// Name is the plugin's name in the scheduler configuration.
const Name = lockstep.TopologyPlacementPlugin

// TopologyPlacement is the plugin.
type TopologyPlacement struct {
	logger klog.Logger
	args   *Args
	// handle is the framework of the first profile that enabled the plugin.
	// Every profile shares the instance, so it is used only for what the
	// profiles of a scheduler share: the client, informers, queue and
	// waiting pods (its event recorder reports as that profile).
	handle framework.Handle
	clock  clock.WithDelayedExecution
	// evict carries out the plugin's preemptions (evictor).
	evict       *gangpreemption.Evictor
	evictorOnce sync.Once
	// reader serves NodeTopology and PodGroup objects from an informer cache.
	reader client.Reader
	client client.Client
	// gangs is the gang manager: the books of held capacity, the gangs
	// turned away and their retries, holds and nominations.
	gangs *gangmanager.Manager
	// view is the node view: NodeTopology, the DRA driver's devices, node
	// health, and the planner's snapshot.
	view    *nodeview.View
	metrics *pluginMetrics
	// profiles are the scheduler's profiles that enable the plugin: only
	// their pods' lockstep.dev/gpus annotations are adopted (adoption).
	profiles *keyset.Set
	// ignored are the pods (UID/annotation) whose GPU annotation was
	// refused, so each gets its event once.
	ignored *keyset.Set
	// defaultPreemption is upstream's, for pods outside gangs (PostFilter);
	// nil (tests) preempts nothing for them.
	defaultPreemption *defaultpreemption.DefaultPreemption
	// pdbs lists the PodDisruptionBudgets gang preemption weighs; nil
	// (tests) weighs none.
	pdbs policylisters.PodDisruptionBudgetLister
	// behind is set until the plugin's informer handlers have handled what
	// their informers first listed (catchUp): the scheduler starts
	// scheduling once its informers synced, while the handlers that index
	// NodeTopology, judge its health and adopt bound pods' GPUs may still
	// be replaying them. Gangs are not planned meanwhile (caughtUp).
	behind *atomic.Bool
	// binds bounds how far scheduling runs ahead of the plugin's binds.
	binds *bindBacklog
}

// catchUp waits until every registration in synced has handled its
// informer's first list, then lets gangs be planned and retries those
// turned away meanwhile: no cluster event need follow.
func (p *TopologyPlacement) catchUp(ctx context.Context, synced ...cache.InformerSynced) {
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), synced...) {
		return
	}
	p.behind.Store(false)
	p.logger.V(2).Info("Informer handlers caught up; planning gangs")
	p.gangs.RetryTurnedAway("")
}

// caughtUp reports whether gangs may be planned (behind). A gang asked
// about before is remembered as turned away, and so retried by catchUp.
func (p *TopologyPlacement) caughtUp(gang string) bool {
	if !p.behind.Load() {
		return true
	}
	p.gangs.TurnedAway(gang)
	// Read again once the gang is remembered: catchUp takes the gangs
	// turned away after it clears behind, so a gang not seen caught up
	// here is among them.
	return !p.behind.Load()
}

var (
	_ framework.PreFilterPlugin   = &TopologyPlacement{}
	_ framework.FilterPlugin      = &TopologyPlacement{}
	_ framework.PreScorePlugin    = &TopologyPlacement{}
	_ framework.ScorePlugin       = &TopologyPlacement{}
	_ framework.ReservePlugin     = &TopologyPlacement{}
	_ framework.PreBindPlugin     = &TopologyPlacement{}
	_ framework.BindPlugin        = &TopologyPlacement{}
	_ framework.EnqueueExtensions = &TopologyPlacement{}
)

// New is the plugin factory: it returns the scheduler's plugin, built from
// args for the first profile that enables it, the same instance for every
// later one (see instances).
func (sh *Shared) New(ctx context.Context, obj runtime.Object, handle framework.Handle) (framework.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	profile := profileName(handle)
	p, err := sh.instances.getOrBuild(ctx, handle.SharedInformerFactory(), profile, args, func() (*TopologyPlacement, error) {
		return build(ctx, args, handle)
	})
	if err != nil {
		return nil, err
	}
	if profile != "" {
		p.profiles.Add(profile)
	}
	return p, nil
}

// build makes a plugin instance with its caches, informer handlers and
// plan sweep.
func build(ctx context.Context, args *Args, handle framework.Handle) (*TopologyPlacement, error) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	objCache, err := ctrlcache.New(handle.KubeConfig(), ctrlcache.Options{
		Scheme: scheme,
		// Nothing reads managedFields: memory the stock scheduler does not
		// spend. NodeTopology has its own paged informer
		// (nodeview.View.NewInformer).
		DefaultTransform: ctrlcache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating PodGroup cache: %w", err)
	}
	pgInformer, err := objCache.GetInformer(ctx, &schedv1alpha1.PodGroup{})
	if err != nil {
		return nil, fmt.Errorf("watching PodGroups: %w", err)
	}
	if err := nodeview.SlimNodeInformer(handle.SharedInformerFactory()); err != nil {
		logger.Info("Node informer keeps managedFields", "reason", err)
	}
	// The registrations of the plugin's own handlers: their HasSynced says
	// when PreFilter may plan (catchUp).
	var handlers []cache.InformerSynced
	register := func(inf nodeview.HandlerAdder, h cache.ResourceEventHandler) error {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		handlers = append(handlers, reg.HasSynced)
		return nil
	}
	m, err := registerMetrics(legacyregistry.Register)
	if err != nil {
		return nil, err
	}
	p := &TopologyPlacement{
		logger:   logger,
		args:     args,
		handle:   handle,
		clock:    clock.RealClock{},
		reader:   objCache,
		metrics:  m,
		profiles: keyset.New(),
		ignored:  keyset.New(),
		binds:    newBindBacklog(handle.KubeConfig().QPS, clock.RealClock{}),
	}
	p.gangs = p.newGangManager()
	p.view = p.newNodeView(nodeview.FrameworkDRA(ctx, handle), handle.EventRecorder())
	ntInformer, err := p.view.NewInformer(handle.KubeConfig(), scheme, register)
	if err != nil {
		return nil, fmt.Errorf("watching NodeTopology: %w", err)
	}
	if p.view.HasDRA() {
		onSlices, onClaims := p.view.FollowDevices()
		if err := register(handle.SharedInformerFactory().Resource().V1().ResourceSlices().Informer(), onSlices); err != nil {
			return nil, err
		}
		if err := register(handle.SharedInformerFactory().Resource().V1().ResourceClaims().Informer(), onClaims); err != nil {
			return nil, err
		}
		if _, err := handle.SharedInformerFactory().Resource().V1().ResourceClaims().Informer().AddEventHandler(p.claimEvents()); err != nil {
			return nil, fmt.Errorf("following ResourceClaims into the books: %w", err)
		}
	}
	go func() {
		if err := objCache.Start(ctx); err != nil {
			logger.Error(err, "NodeTopology cache stopped")
		}
	}()
	go ntInformer.RunWithContext(ctx)
	if !objCache.WaitForCacheSync(ctx) || !cache.WaitForCacheSync(ctx.Done(), ntInformer.HasSynced) {
		return nil, fmt.Errorf("%s: NodeTopology and PodGroup caches did not sync", Name)
	}
	if p.client, err = client.New(handle.KubeConfig(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	p.pdbs = handle.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister()
	if p.defaultPreemption, err = newDefaultPreemption(ctx, handle, p.eligibleAlone); err != nil {
		return nil, fmt.Errorf("%s: building %s for pods outside gangs: %w", Name, defaultpreemption.Name, err)
	}
	if err := register(pgInformer, p.podGroupEvents(ctx)); err != nil {
		return nil, err
	}
	podInformer := handle.SharedInformerFactory().Core().V1().Pods().Informer()
	if err := podgroupindex.Register(podInformer); err != nil {
		logger.Error(err, "Listing gangs' pods without the PodGroup index")
	}
	if err := register(podInformer, p.podEvents(ctx)); err != nil {
		return nil, err
	}
	p.behind = &atomic.Bool{}
	p.behind.Store(true)
	go p.catchUp(ctx, handlers...)
	go p.expirePlans(ctx)
	logger.V(2).Info("Plugin ready", "levels", args.Levels, "defaultMode", args.DefaultMode)
	return p, nil
}

// podGroupEvents follows PodGroups. A deleted PodGroup (a suspended or
// evicted job's) ends its drain now, not at the next sweep or the stall,
// its plans' open slots go (dropPlansOf), and its gang's verdicts are
// forgotten. A PodGroup created or changed
// retires its gang's verdict: gangSpec reads this informer's cache.
func (p *TopologyPlacement) podGroupEvents(ctx context.Context) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pg, ok := obj.(*schedv1alpha1.PodGroup); ok {
				p.gangs.Verdicts.GangChanged(pg.Namespace + "/" + pg.Name)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, okOld := oldObj.(*schedv1alpha1.PodGroup)
			pg, ok := obj.(*schedv1alpha1.PodGroup)
			if ok && (!okOld || gangmanager.PodGroupChanged(old, pg)) {
				p.gangs.Verdicts.GangChanged(pg.Namespace + "/" + pg.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pg, ok := obj.(*schedv1alpha1.PodGroup); ok {
				p.releaseDrainsOf(ctx, pg.Namespace+"/"+pg.Name, "its PodGroup was deleted")
				p.dropPlansOf(pg.Namespace + "/" + pg.Name)
				p.gangs.Verdicts.ForgetGang(pg.Namespace + "/" + pg.Name)
			}
		},
	}
}

// podEvents keeps the books in step with pods. A pod's GPUs are forgotten
// once it is gone or finished: from then on the scheduler's own accounting
// and the NodeTopology agree without us. The GPUs of pods found bound with
// them that the books do not know (a previous leader's, or a Binding whose
// answer was lost) are adopted. A victim of gang preemption going ends its
// hold when it is the last (victimGone). A pod gone or finished retires
// every verdict, once the books forgot it; a gang's pod added or changed
// retires its gang's (verdicts).
func (p *TopologyPlacement) podEvents(ctx context.Context) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				p.adoptBoundGPUs(pod)
				p.gangs.ObservePod(pod)
				p.gangs.Verdicts.GangChanged(gangmanager.GangKey(pod))
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return
			}
			p.evictor().Heard(pod, false)
			if old, ok := oldObj.(*v1.Pod); !ok || gangmanager.MemberChanged(old, pod) {
				p.gangs.Verdicts.GangChanged(gangmanager.GangKey(pod))
			}
			if pod.Spec.NodeName != "" {
				// Bound, by whichever binder: nothing of it is in flight.
				p.binds.done(pod.UID)
			}
			if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
				p.gangs.Books.ForgetPod(pod.UID)
				p.victimGone(ctx, pod)
				p.gangs.Verdicts.MayFit()
				return
			}
			if pod.DeletionTimestamp != nil {
				p.releaseDrainIfNoPending(ctx, pod)
			}
			p.adoptBoundGPUs(pod)
			p.gangs.ObservePod(pod)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				p.gangs.Books.ForgetPod(pod.UID)
				p.binds.done(pod.UID)
				p.evictor().Heard(pod, true)
				p.victimGone(ctx, pod)
				p.gangs.PodGone(pod.UID)
				p.ignored.Remove(string(pod.UID) + "/" + pod.Annotations[lockstep.AnnotationGPUs])
				p.releaseDrainIfNoPending(ctx, pod)
				p.gangs.Verdicts.GangChanged(gangmanager.GangKey(pod))
				p.gangs.Verdicts.MayFit()
			}
		},
	}
}

// Name returns the plugin name.
func (p *TopologyPlacement) Name() string { return Name }

// EventsToRegister lists what can make a gang this plugin rejected fit, each
// with a QueueingHint (package requeue): bound pods leaving or scaling
// down, nodes added or grown, the gang's PodGroup created or changed, and,
// for gangs claiming GPUs through DRA, claims' devices freed and
// ResourceSlices published.
// The queue retries a pod only on events of the plugins that rejected it; a
// gang Coscheduling rejected at PreFilter is retried by
// LockstepCoscheduling's hints on the same events.
//
// A NodeTopology reporting more free GPUs is not registered here: for a
// custom resource the scheduler runs a dynamic informer of its own, whose
// unstructured copies of 5,000 NodeTopology objects took several times the
// stock scheduler's whole heap. The plugin's typed informer sees the same
// changes and retries the gangs it turned away (topologyChanged).
//
// A bound pod's deletion is judged more narrowly than Coscheduling judges
// it (podDeleted), and every hint that queues also retires the remembered
// verdicts (retireOnQueue).
func (p *TopologyPlacement) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	events := append(requeue.CapacityEvents(), requeue.DRAEvents()...)
	for i := range events {
		hint := events[i].QueueingHintFn
		if events[i].Event.Resource == fwk.Pod && events[i].Event.ActionType == fwk.Delete {
			hint = p.podDeleted
		}
		events[i].QueueingHintFn = p.retireOnQueue(hint)
	}
	return events, nil
}

// newNodeView returns the plugin's node view, reading held capacity from
// the gang manager's books: a NodeTopology change that can make room
// retires the verdicts, a node usable again retries the gangs turned away,
// and every NodeTopology's reported allocations go to the books
// (topologyChanged).
func (p *TopologyPlacement) newNodeView(dra nodeview.Source, recorder events.EventRecorder) *nodeview.View {
	return nodeview.New(nodeview.Config{
		Topology: p.args.TopologyConfig,
		MaxAge:   p.args.maxAge(),
		Held:     p.gangs.Books,
		Clock:    p.clock,
		Recorder: recorder,
		Logger:   p.logger,
		Excluded: p.metrics.nodesExcluded,
		Unjoined: p.metrics.draUnjoinedDevices,
		Freed:    p.gangs.Verdicts.MayFit,
		Rejoined: func() { p.gangs.RetryTurnedAway("") },
		Changed:  p.topologyChanged,
		DRA:      dra,
	})
}

// topologyChanged is told of every NodeTopology the node view took: the
// books take the allocations its agent reports (gangmanager.Manager.TakeReported),
// and the gangs PreFilter turned away are retried when it reports GPUs
// free that were not (requeue.NodeTopologyFreesGPUs).
func (p *TopologyPlacement) topologyChanged(old, nt *v1alpha1.NodeTopology) {
	p.gangs.TakeReported(p.logger, nt)
	var oldObj any
	if old != nil {
		oldObj = old
	}
	if frees, err := requeue.NodeTopologyFreesGPUs(oldObj, nt); frees || err != nil {
		p.gangs.RetryTurnedAway("")
	}
}

// expirePlans runs sweep every few seconds until ctx ends.
func (p *TopologyPlacement) expirePlans(ctx context.Context) {
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		p.sweep(ctx)
	}
}

// sweep drops plans that held capacity too long without completing and
// rejects their waiting members so the gang is retried whole, forgets
// deleted gangs, and samples the held-capacity gauges.
func (p *TopologyPlacement) sweep(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	for _, key := range p.gangs.Books.Expired(p.clock.Now(), p.args.PlanTTL.Duration) {
		logger.V(2).Info("Plan expired before the gang completed; releasing it", "podGroup", key)
		p.invalidate(key, dropExpired)
	}
	// A drain normally ends at the gang's next attempt (retryAfter); this
	// ends one whose gang is not tried again, and a hold whose victims
	// are still going past its bound, said first.
	p.expireHolds(ctx)
	for _, key := range p.gangs.ExpireDrains(p.clock.Now()) {
		logger.V(2).Info("Drain stalled before the gang was tried again; released it", "podGroup", key)
	}
	// A cycle that ran while the gang's last pending pod was being deleted
	// may drain a domain after that deletion's release ran
	// (releaseDrainIfNoPending): held for nobody, the drain would keep the
	// domain from equal-priority gangs until it stalls. It ends here.
	for _, key := range p.gangs.Books.Draining() {
		if !p.gangs.HasPendingMember(key) {
			logger.V(2).Info("Releasing a drain whose gang has no pending pod left", "podGroup", key)
			p.releaseDrain(ctx, key)
		}
	}
	p.forgetDeletedGangs(ctx)
	p.view.Excluded()
	plans, gpus := p.gangs.Books.Holding()
	p.metrics.plansHeld.Set(float64(plans))
	p.metrics.heldGPUs.Set(float64(gpus))
	p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
	p.metrics.bindsInFlight.Set(float64(p.binds.size()))
}

// forgetDeletedGangs drops the first-attempt times of gangs whose PodGroup
// is gone: a gang deleted while it waited is never placed, which is the
// other moment its time is forgotten.
func (p *TopologyPlacement) forgetDeletedGangs(ctx context.Context) {
	for _, key := range p.gangs.Attempted() {
		ns, name, ok := gangmanager.SplitPlanKey(key)
		if !ok {
			continue
		}
		err := p.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &schedv1alpha1.PodGroup{})
		if apierrors.IsNotFound(err) {
			p.gangs.ForgetFirstSeen(key)
			p.releaseDrain(ctx, key)
			p.dropPlansOf(gangmanager.GangOf(key))
		}
	}
}

// dropPlansOf drops the plans of a deleted gang that still have open
// slots: nothing will take them, and until planTTL they hid their GPUs
// from every other gang (a suspended job's, an evicted one's). Plans whose
// members are all reserved go with their pods.
func (p *TopologyPlacement) dropPlansOf(gang string) {
	for _, key := range p.gangs.Books.OpenPlansOf(gang) {
		p.logger.V(2).Info("Dropping the plan of a deleted gang", "plugin", Name, "podGroup", key)
		p.invalidate(key, dropGangDeleted)
	}
}

// invalidate drops a gang's plan, rejects its members waiting at Permit
// and has them retried (gangmanager.Manager.Invalidate).
func (p *TopologyPlacement) invalidate(key string, reason dropReason) {
	if p.gangs.Invalidate(key, reason.message()) {
		p.metrics.plansInvalidated.WithLabelValues(string(reason)).Inc()
	}
}

// newGangManager returns the plugin's gang manager, which retries gangs
// through the scheduler's queue (activateUnbound), rejects waiting members
// through its map of waiting pods (rejectWaiting).
func (p *TopologyPlacement) newGangManager() *gangmanager.Manager {
	return gangmanager.New(gangmanager.Config{
		Clock:    p.clock,
		Activate: p.activateUnbound,
		Reject:   p.rejectWaiting,
		Pods: func(ns, name string) ([]*v1.Pod, error) {
			return podgroupindex.Members(p.handle.SharedInformerFactory().Core().V1().Pods(), ns, name)
		},
		Size: func(pod *v1.Pod) (int, bool) {
			r := p.view.Request(pod)
			return r.GPUs, r.Claimed
		},
		DrainStall: gangmanager.DrainStallWaits * p.args.PreferredWait.Duration,
	})
}

// gangPlan is one gang's plan in the books (gangmanager.Plan).
type gangPlan = gangmanager.Plan

// assignment is the GPUs a reserved pod was given.
type assignment = gangmanager.Assignment

// rejectWaiting rejects the members of gang key waiting at Permit.
func (p *TopologyPlacement) rejectWaiting(key, msg string) {
	p.handle.IterateOverWaitingPods(func(wp framework.WaitingPod) {
		if p.planKey(wp.GetPod()) == key {
			wp.Reject(Name, msg)
		}
	})
}

// activateUnbound moves the gang's pods that are still unbound to the active
// queue.
func (p *TopologyPlacement) activateUnbound(key string) {
	if unbound := p.gangs.Unbound(key); len(unbound) > 0 {
		p.handle.Activate(p.logger, unbound)
	}
}

// planKey is the plan key of pod, whose GPUs the node view counts
// (gangmanager.Manager.PlanKey).
func (p *TopologyPlacement) planKey(pod *v1.Pod) string {
	return p.gangs.PlanKey(pod)
}

// gangSpec reads the gang's PodGroup: its size and topology constraint.
func (p *TopologyPlacement) gangSpec(ctx context.Context, pod *v1.Pod) (*schedv1alpha1.PodGroup, error) {
	pg := &schedv1alpha1.PodGroup{}
	err := p.reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pod.Labels[schedv1alpha1.PodGroupLabel]}, pg)
	if err != nil {
		return nil, err
	}
	return pg, nil
}
