package topologyplacement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/util/feature"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangpreemption"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

var (
	_ framework.PostFilterPlugin = &TopologyPlacement{}
	_ framework.PreEnqueuePlugin = &TopologyPlacement{}
)

// newDefaultPreemption builds upstream's DefaultPreemption with its default
// args (defaulted by the scheduler's scheme, as an unconfigured plugin's
// are) and the features of the process's feature gates, as kube-scheduler's
// in-tree registry builds it, with eligible as its IsEligiblePod: pods
// outside gangs preempt pods outside gangs exactly as on the stock
// scheduler, and never a gang member (preemptForPod). It runs on handle,
// the framework of the first profile that enabled TopologyPlacement; every
// profile has the same plugins and shares the scheduler's snapshot and
// queue.
func newDefaultPreemption(ctx context.Context, handle framework.Handle, eligible defaultpreemption.IsEligiblePodFunc) (*defaultpreemption.DefaultPreemption, error) {
	versioned := &configv1.DefaultPreemptionArgs{}
	scheme.Scheme.Default(versioned)
	args := &config.DefaultPreemptionArgs{}
	if err := scheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("defaulting %s args: %w", defaultpreemption.Name, err)
	}
	dp, err := defaultpreemption.New(ctx, args, handle, plfeature.NewSchedulerFeaturesFromGates(feature.DefaultFeatureGate))
	if err != nil {
		return nil, err
	}
	dp.IsEligiblePod = eligible
	return dp, nil
}

// PreEnqueue is DefaultPreemption's, which the configuration disables in
// favour of this plugin: with asynchronous preemption, a pod outside gangs
// waits while its victims are evicted. Gang members never wait here.
func (p *TopologyPlacement) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	if p.defaultPreemption == nil {
		return nil
	}
	return p.defaultPreemption.PreEnqueue(ctx, pod)
}

// PostFilter preempts for a gang that PreFilter found no room for, and
// hands pods outside gangs to upstream's DefaultPreemption. The rules of
// who is evicted are placement.Preempt's; this reads its input (the
// snapshot PreFilter planned on and the running work on it) and carries
// out the decision: the domain is held for the gang in the books, the
// victims are evicted off the scheduling thread, and the member is
// nominated to its node of the plan, as every later member is while the
// victims go.
func (p *TopologyPlacement) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m framework.NodeToStatusReader) (*framework.PostFilterResult, *fwk.Status) {
	req := p.view.Request(pod)
	key := gangmanager.PlanKey(pod, req.GPUs)
	if key == "" {
		return p.preemptForPod(ctx, state, pod, m)
	}
	pr := p.preemptForGang(ctx, state, pod)
	if pr.err != nil {
		return nil, fwk.AsStatus(pr.err)
	}
	p.metrics.preemptionAttempts.WithLabelValues(pr.outcome).Inc()
	switch pr.outcome {
	case preemptionPreempted, preemptionWaitingForVictims:
		return nominate(pr.node), fwk.NewStatus(fwk.Success)
	case preemptionNoRoom:
		// No preemption helps the gang now: a node nominated for it before
		// (a hold that expired or was spent) is cleared, as upstream's
		// DefaultPreemption clears it, or the scheduler would keep
		// counting the member against that node's room when filtering
		// lower-priority pods while the planner thinks the node free.
		p.gangs.Nominate(key, pod.UID, pod.Namespace+"/"+pod.Name, "")
		return nominate(""), fwk.NewStatus(fwk.Unschedulable, "gang preemption: "+pr.reason)
	default:
		return nil, fwk.NewStatus(fwk.Unschedulable, "gang preemption: "+pr.reason)
	}
}

// preemption is what PostFilter did for a gang member, which PostFilter
// answers the framework with.
type preemption struct {
	// outcome is the result label of preemption_attempts_total.
	outcome string
	// node is the node the member is nominated to, when its gang preempted
	// or waits for its victims.
	node string
	// reason says why the gang cannot preempt or preempts nothing.
	reason string
	err    error
}

// preemptForGang is PostFilter for a gang member.
func (p *TopologyPlacement) preemptForGang(ctx context.Context, state fwk.CycleState, pod *v1.Pod) preemption {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return preemption{outcome: preemptionNotEligible, reason: "the pod's preemptionPolicy is Never"}
	}
	s, err := stateOf(state)
	if err != nil {
		// Coscheduling turned the gang away before our PreFilter ran.
		if !p.caughtUp(p.planKey(pod)) {
			return preemption{outcome: preemptionNotEligible, reason: notCaughtUp}
		}
		s = p.decideUnplanned(ctx, pod)
	}
	if s == nil || s.waiting == nil {
		// Too few members yet, or the gang was refused (a bad
		// constraint, no PodGroup) rather than waiting for room:
		// evicting would not place it.
		return preemption{outcome: preemptionNotEligible, reason: "the gang is not waiting for room"}
	}
	p.adoptVictims(ctx, s.waiting.nodes)
	if plan, ok := p.gangs.Books.Preemption(s.gang); ok {
		// A hold rebuilt from its victims (plan nil) is never spent here:
		// without the plan its nodes are unknown, and the hold ends as a
		// drain does, when it stops freeing GPUs.
		since, _ := p.gangs.Books.HeldSince(s.gang)
		if p.gangs.Books.PendingVictims(s.gang) > 0 || plan == nil || !p.victims().OutrankedOn(plan, s.waiting.priority, since, p.nodeLookup(s.waiting.nodes)) {
			node := p.holdNomination(pod, s.gang, s.req.GPUs, plan)
			logger.V(5).Info("Gang's earlier preemption still waits for its victims; nominating", "podGroup", s.gang, "node", node)
			return preemption{outcome: preemptionWaitingForVictims, node: node}
		}
		// Its victims are gone, and GPU work that outranks the gang
		// landed in the domain since: it took the room. The hold is
		// spent; the gang may make room again.
		logger.V(2).Info("The domain the gang preempted for was taken by work that outranks it; preempting again", "podGroup", s.gang, "domain", plan.Domain.ID)
		p.releaseDrain(ctx, s.gang)
	}
	snap, err := p.view.Snapshot(pod, s.gang, s.req, s.waiting.nodes)
	if err != nil {
		return preemption{err: err}
	}
	now := p.clock.Now()
	candidates, podsOf := p.victims().Candidates(pod, s.waiting.priority, snap, s.waiting.nodes)
	pre, err := placement.Preempt(snap, placement.Preemptor{
		Gang: s.waiting.gang, Priority: s.waiting.priority, Now: now, MinRuntime: p.args.PreemptionMinRuntime.Duration,
		Held: p.gangs.Books.HeldForOthers(snap.Nodes, s.gang, s.waiting.priority),
	}, candidates)
	var none *placement.NoPreemption
	if errors.As(err, &none) {
		logger.V(2).Info("No preemption makes room for the gang", "podGroup", s.gang, "reason", none.Reason)
		return preemption{outcome: preemptionNoRoom, reason: none.Reason}
	}
	if err != nil {
		return preemption{err: err}
	}
	if pre.Plan.Domain == nil {
		return preemption{outcome: preemptionNoRoom, reason: "the plan names no domain to hold"}
	}
	var victims []*v1.Pod
	var uids []string
	evicted := evictedOf(pre, podsOf)
	for _, v := range pre.Victims {
		for _, vp := range podsOf[v.Key] {
			victims = append(victims, vp)
			uids = append(uids, string(vp.UID))
		}
	}
	released, ok := p.gangs.Books.Hold(s.gang, pre.Plan, s.waiting.priority, uids, now)
	if !ok {
		logger.V(2).Info("The domain the preemption would free is held for a gang of equal or higher priority; evicting nothing", "podGroup", s.gang, "domain", pre.Plan.Domain.ID)
		return preemption{outcome: preemptionNoRoom, reason: fmt.Sprintf("%s is held for a gang of equal or higher priority", pre.Plan.Domain.DisplayID())}
	}
	// The hold waits for its victims no longer than the longest of their
	// notices and grace periods and a drain stall after: a victim stuck
	// terminating (its node dark, a finalizer) must not keep the domain
	// closed to equal- and lower-priority work for ever (expireHolds).
	p.gangs.Books.BoundHold(s.gang, now.Add(gangpreemption.LongestNotice(evicted)+gangpreemption.LongestGrace(victims)+p.gangs.DrainStall()))
	p.gangs.NameVictims(victims)
	p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
	if len(released) > 0 {
		logger.V(2).Info("Released the drains of lower-priority gangs in the domain", "podGroup", s.gang, "released", released)
		p.gangs.RetryTurnedAway(s.gang)
	}
	preemptor := gangmanager.GangKey(pod)
	by := lockstep.Preemption{
		Preemptor: preemptor, Priority: s.waiting.priority, Domain: pre.Plan.Domain.DisplayID(),
		Plan: s.gang, DomainID: pre.Plan.Domain.ID,
	}
	names, _, broken := p.countVictims(pre, podsOf)
	logger.V(2).Info("Preempting for the gang", "podGroup", s.gang, "priority", s.waiting.priority, "domain", pre.Plan.Domain.ID,
		"victims", names, "pods", len(victims), "gpuSeconds", pre.Cost.GPUSeconds, "pdbViolations", pre.Cost.PDBViolations)
	p.handle.EventRecorder().Eventf(pod, nil, v1.EventTypeNormal, gangpreemption.EventPreempting, "Preempting",
		"Preempting %s in %s for gang %s (priority %d)%s", strings.Join(names, ", "), pre.Plan.Domain.DisplayID(), preemptor, s.waiting.priority, broken)
	p.evictor().Evict(logger, pod, evicted, by)
	return preemption{outcome: preemptionPreempted, node: p.holdNomination(pod, s.gang, s.req.GPUs, pre.Plan)}
}

// holdNomination returns the node pod, a member of gang key whose
// preemption holds a domain, is nominated to, and records it with the gang
// manager. A hold rebuilt from its victims has no plan: its members keep
// the nominations a scheduler before this one gave them.
func (p *TopologyPlacement) holdNomination(pod *v1.Pod, key string, gpus int, plan *placement.Plan) string {
	var node string
	switch {
	case plan != nil:
		node = p.gangs.NodeInPlan(pod, gpus, plan)
	case p.gangs.NominatedNode(pod.UID) != "":
		node = p.gangs.NominatedNode(pod.UID)
	default:
		node = pod.Status.NominatedNodeName
	}
	p.gangs.Nominate(key, pod.UID, pod.Namespace+"/"+pod.Name, node)
	return node
}

// adoptVictims rebuilds the holds of preemptions this scheduler did not
// make, from the victims the pod informer showed going
// (gangmanager.Manager.AdoptPending), on the domain tree of nodes, and
// records the nominations their preemptors' members carry. It runs before
// a gang is planned or preempts: a scheduler that restarted or took over
// mid-preemption must see the domain held and its victims going, or it
// would evict a second set.
func (p *TopologyPlacement) adoptVictims(ctx context.Context, nodes []fwk.NodeInfo) {
	if !p.gangs.HasPending() {
		return
	}
	tree, err := p.view.Tree(nodes)
	if err != nil {
		return
	}
	adopted := p.gangs.AdoptPending(tree.Find, p.clock.Now(), p.gangs.DrainStall())
	p.resumeNotices(klog.FromContext(ctx), adopted.Noticed)
	for _, key := range adopted.Gangs {
		klog.FromContext(ctx).V(2).Info("Rebuilt the hold of a preemption from its victims", "plugin", Name, "podGroup", key)
		ns, name, _ := gangmanager.SplitPlanKey(key)
		members, err := p.gangs.GangPods(ns, name)
		if err != nil {
			continue
		}
		for _, m := range members {
			if m.Spec.NodeName == "" && m.Status.NominatedNodeName != "" && p.planKey(m) == key && p.gangs.NominatedNode(m.UID) == "" {
				p.gangs.Nominate(key, m.UID, m.Namespace+"/"+m.Name, m.Status.NominatedNodeName)
			}
		}
	}
	p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
}

// resumeNotices takes over the notices a scheduler before this one gave
// victims (gangmanager.Noticed): gangpreemption.Reader.Resume evicts each
// at its notice's deadline or when it answers it.
func (p *TopologyPlacement) resumeNotices(logger klog.Logger, noticed []gangmanager.Noticed) {
	if len(noticed) == 0 {
		return
	}
	p.victims().Resume(logger, p.evictor(), p.handle.SharedInformerFactory().Core().V1().Pods().Lister(), noticed)
}

// decideUnplanned is PreFilter's decision for a gang member whose PreFilter
// did not run, changing nothing, or nil when the gang is not waiting for
// room. Coscheduling, which runs first, turns a gang away when its
// PodGroup's minResources exceed the cluster's free capacity, as every
// TrainingJob's and training-operator's PodGroup states them: on a full
// cluster, exactly when a higher-priority gang needs preemption, our
// PreFilter never sees it. Coscheduling also turns away a gang with fewer
// live pods than minMember; that one must not preempt, as its missing
// members may never come.
func (p *TopologyPlacement) decideUnplanned(ctx context.Context, pod *v1.Pod) *cycleState {
	member := p.view.Request(pod)
	s := &cycleState{gang: gangmanager.PlanKey(pod, member.GPUs), req: member, slot: -1}
	pg, err := p.gangSpec(ctx, pod)
	if err != nil {
		return nil
	}
	members, err := p.gangs.GangPods(pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel])
	if err != nil {
		return nil
	}
	live := 0
	for _, m := range members {
		if m.DeletionTimestamp == nil && m.Status.Phase != v1.PodSucceeded && m.Status.Phase != v1.PodFailed {
			live++
		}
	}
	if live < int(pg.Spec.MinMember) {
		return nil
	}
	lister := p.handle.SnapshotSharedLister()
	if lister == nil {
		return nil
	}
	nodes, err := lister.NodeInfos().List()
	if err != nil {
		return nil
	}
	req, err := p.request(pg, pod, s, p.gangs.ClassMembers(pod, s.req.GPUs))
	if err != nil {
		return nil
	}
	snap, err := p.view.Snapshot(pod, s.gang, s.req, nodes)
	if err != nil {
		return nil
	}
	if d := placement.Decide(snap, req, p.policy()); d.Verdict == placement.Waiting {
		s.waiting = &waitingGang{gang: d.Gang, priority: corev1helpers.PodPriority(pod), nodes: nodes}
	}
	return s
}

// victimGone records that pod, if evicted for a gang's hold, is gone. When
// it was the hold's last victim the domain is free for the gang, which is
// retried at once: the scheduler's pod deletion event may have retried it
// before the books knew, and then it was nominated, not planned.
func (p *TopologyPlacement) victimGone(ctx context.Context, pod *v1.Pod) {
	gang, last := p.gangs.VictimGone(pod.UID, p.clock.Now())
	if !last {
		return
	}
	klog.FromContext(ctx).V(2).Info("The last victim of the gang's preemption is gone; retrying the gang", "plugin", Name, "podGroup", gang, "victim", klog.KObj(pod))
	p.gangs.Activate(gang)
}

// nominate is the PostFilter result nominating node.
func nominate(node string) *framework.PostFilterResult {
	return &framework.PostFilterResult{NominatingInfo: &framework.NominatingInfo{NominatedNodeName: node, NominatingMode: framework.ModeOverride}}
}

// expireHolds says which victims each hold waited for past its bound
// (BoundHold), in an event on the preemptor's PodGroup, the log and
// preemption_holds_expired_total; the sweep's ExpireDrains then releases
// the domain. Those victims stay evicted for the gang and are never its
// or another gang's candidates again; the gang is retried, and may
// preempt elsewhere.
func (p *TopologyPlacement) expireHolds(ctx context.Context) {
	now := p.clock.Now()
	for _, h := range p.gangs.Books.Holds() {
		if len(p.gangs.Books.Overdue(h.Gang, now)) > 0 {
			p.holdExpired(ctx, h.Gang, p.gangs.WaitingFor(h.Gang))
		}
	}
}

// holdExpired says that gang's hold is released with victims stuck still
// terminating past its bound: in the log, preemption_holds_expired_total
// and an event on the gang's PodGroup. The sweep (expireHolds) and a
// member's PreFilter (endDrainIfDue), whichever ends the hold first, say it.
func (p *TopologyPlacement) holdExpired(ctx context.Context, gang string, stuck []string) {
	klog.FromContext(ctx).Info("Releasing the domain of a preemption whose victims are still terminating past the hold's bound", "plugin", Name, "podGroup", gang, "victims", stuck)
	p.metrics.holdsExpired.Inc()
	ns, name, ok := gangmanager.SplitPlanKey(gang)
	if !ok {
		return
	}
	pg := &schedv1alpha1.PodGroup{}
	if err := p.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pg); err != nil {
		return
	}
	p.handle.EventRecorder().Eventf(pg, nil, v1.EventTypeWarning, gangpreemption.EventHoldExpired, "Preempting",
		"Released the domain held for the gang's preemption: %s still terminating past the hold's bound (the victims' grace period and %s)", strings.Join(stuck, ", "), p.gangs.DrainStall())
}

// victims reads the candidates of the plugin's preemptions.
func (p *TopologyPlacement) victims() gangpreemption.Reader {
	return gangpreemption.Reader{View: p.view, Gangs: p.gangs, MinMember: p.minMember, PDBs: p.pdbs, Now: p.clock.Now()}
}

// minMember is the minMember of gang ("namespace/podgroup") as its
// PodGroup in the informer cache states it.
func (p *TopologyPlacement) minMember(gang string) (int, bool) {
	ns, name, ok := gangmanager.SplitPlanKey(gang)
	if !ok {
		return 0, false
	}
	pg := &schedv1alpha1.PodGroup{}
	if err := p.reader.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pg); err != nil {
		return 0, false
	}
	return int(pg.Spec.MinMember), true
}

// evictor evicts the victims of the plugin's preemptions through the
// framework's client: a victim that is not going ends its part of the
// hold (victimGone), and what each victim lost is counted when it is
// evicted (preemption_lost_gpu_hours_total), after any notice.
func (p *TopologyPlacement) evictor() *gangpreemption.Evictor {
	p.evictorOnce.Do(func() {
		p.evict = &gangpreemption.Evictor{
			Client: p.handle.ClientSet(), Recorder: p.handle.EventRecorder(), Clock: p.clock,
			NotGoing: p.victimGone, Failed: p.metrics.evictionErrors.Inc,
			Lost: func(gpuSeconds float64) { p.metrics.preemptionGPUHours.Add(gpuSeconds / 3600) },
		}
	})
	return p.evict
}

// evictedOf is what the evictor is given of pre's victims.
func evictedOf(pre *placement.Preemption, podsOf map[string][]*v1.Pod) []gangpreemption.Victim {
	out := make([]gangpreemption.Victim, len(pre.Victims))
	for i, v := range pre.Victims {
		out[i] = gangpreemption.Victim{Work: v, Pods: podsOf[v.Key]}
	}
	return out
}

// countVictims counts the victims of pre, a preemption about to be carried
// out, in the preemption metrics, and returns their keys, their pods (of
// podsOf) and what brokenBudgets says of them.
func (p *TopologyPlacement) countVictims(pre *placement.Preemption, podsOf map[string][]*v1.Pod) (names []string, pods []*v1.Pod, broken string) {
	names = make([]string, len(pre.Victims))
	for i, v := range pre.Victims {
		names[i] = v.Key
		kind := victimPod
		if gangmanager.GangKey(podsOf[v.Key][0]) != "" {
			kind = victimGang
		}
		p.metrics.preemptionVictims.WithLabelValues(kind).Inc()
		pods = append(pods, podsOf[v.Key]...)
	}
	return names, pods, p.brokenBudgets(pre, podsOf)
}

// brokenBudgets counts the victims' pods pre evicts against a
// PodDisruptionBudget (preemption_pdb_violations_total) and says which
// budgets, for the Preempting event; "" when it breaks none.
func (p *TopologyPlacement) brokenBudgets(pre *placement.Preemption, podsOf map[string][]*v1.Pod) string {
	if pre.Cost.PDBViolations == 0 {
		return ""
	}
	p.metrics.preemptionPDBViolations.Add(float64(pre.Cost.PDBViolations))
	var names []string
	for _, v := range pre.Victims {
		for _, b := range p.victims().BrokenBudgets(podsOf[v.Key]) {
			if !slices.Contains(names, b) {
				names = append(names, b)
			}
		}
	}
	slices.Sort(names)
	return fmt.Sprintf(", breaking PodDisruptionBudget %s for %d pods: nothing that breaks none makes room", strings.Join(names, ", "), pre.Cost.PDBViolations)
}
