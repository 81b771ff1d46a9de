package topologyplacement

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// stateKey keys this plugin's data in the CycleState.
const stateKey fwk.StateKey = Name

// cycleState is what PreFilter computed for the pod being scheduled.
type cycleState struct {
	// gang is namespace/podgroup, or "" for a pod outside gangs.
	gang string
	req  nodeview.Request
	// plan is the gang's plan; nil outside gangs.
	plan *gangPlan
	// slot is the plan slot of the pod's rank (gangmanager.Manager.SlotOfRank), -1 for a pod
	// without one.
	slot int
	// waiting is set when PreFilter planned the gang and it did not fit
	// (placement.Waiting): only then may PostFilter preempt for it.
	waiting *waitingGang
}

// waitingGang is what PostFilter needs of a gang that did not fit.
type waitingGang struct {
	// gang is the gang as placement.Decide last tried to place it.
	gang     placement.Gang
	priority int32
	// nodes are the cycle's nodes, as PreFilter was given them.
	nodes []fwk.NodeInfo
}

// Clone is never needed to copy: the state is read-only after PreFilter.
func (s *cycleState) Clone() fwk.StateData { return s }

func stateOf(state fwk.CycleState) (*cycleState, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("%s: reading cycle state: %w", Name, err)
	}
	s, ok := data.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state has type %T", Name, data)
	}
	return s, nil
}

// PreFilter plans the pod's gang as a whole, or reuses its plan, and narrows
// the candidate nodes to the plan's open slots. A gang that fits nowhere is
// rejected without holding anything; the framework retries it on the events
// of EventsToRegister.
func (p *TopologyPlacement) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*framework.PreFilterResult, *fwk.Status) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	s := &cycleState{req: p.view.Request(pod), slot: -1}
	s.gang = gangmanager.PlanKey(pod, s.req.GPUs)
	state.Write(stateKey, s)
	if s.req.GPUs > 0 {
		// Scheduling ahead of the binds only queues them (bindBacklog).
		if waited := p.binds.wait(ctx); waited > 0 {
			p.metrics.bindBacklogWait.Add(waited.Seconds())
			logger.V(4).Info("Waited for binds in flight", "waited", waited, "inFlight", p.binds.size())
		}
	}
	if r := claimProblem(gangmanager.GangKey(pod), s.req); r != nil {
		return nil, r.status()
	}
	if s.req.GPUs > 0 {
		// Before any GPU pod is placed, so that a hold a scheduler before
		// this one made keeps pods outside gangs off its domain too.
		p.adoptVictims(ctx, nodes)
	}
	if s.gang == "" {
		return nil, nil
	}
	if !p.caughtUp(s.gang) {
		return nil, (&rejection{code: fwk.Unschedulable, reason: notCaughtUp}).status()
	}
	g, ok := p.gangs.Books.Get(s.gang)
	if ok && !p.planFits(g, nodes, s.req.Claimed) {
		logger.V(2).Info("Plan invalidated: a planned node is gone or taken", "podGroup", s.gang)
		p.invalidate(s.gang, dropNodeUnavailable)
		ok = false
	}
	slot, holds := -1, false
	if ok {
		slot, holds = g.SlotOf(string(pod.UID))
	}
	if ok && g.Complete() && !holds {
		// A member the complete plan has no slot for: an elastic gang grew,
		// or a member was replaced. The gang is planned again for its
		// pending members, beside the ones already placed; the complete
		// plan's members keep their GPUs (Books.Add, Books.ForgetPod).
		logger.V(2).Info("Planning new members of a placed gang", "podGroup", s.gang)
		ok = false
	}
	if !ok {
		if r := p.rememberedVerdict(ctx, pod, s, nodes); r != nil {
			p.gangs.TurnedAway(s.gang)
			return nil, r.status()
		}
		var r *rejection
		if g, r = p.planGang(ctx, pod, s, nodes); r != nil {
			p.gangs.TurnedAway(s.gang)
			return nil, r.status()
		}
		p.gangs.Placed(s.gang)
	}
	s.plan = g
	if holds {
		// A member scheduled again (its binding failed) keeps its slot:
		// Reserve gives it back on that node only.
		return &framework.PreFilterResult{NodeNames: sets.New(g.Plan().Members[slot].Node)}, nil
	}
	s.slot = p.gangs.SlotOfRank(pod, s.req.GPUs, g)
	if s.slot >= 0 && g.Slot(s.slot) == "" {
		node := g.Plan().Members[s.slot].Node
		if p.gangs.Steer(pod.UID, node) {
			return &framework.PreFilterResult{NodeNames: sets.New(node)}, nil
		}
		// The pod was sent to this node before and did not reserve there:
		// some other filter keeps it off. Any open slot will do rather than
		// a gang that never completes; the ring crosses one more boundary.
		logger.V(2).Info("Rank's slot did not take the pod; falling back to any open slot of the plan", "podGroup", s.gang, "rank", pod.Annotations[lockstep.AnnotationRank], "slot", s.slot, "node", node)
	}
	return &framework.PreFilterResult{NodeNames: sets.New(g.OpenNodes()...)}, nil
}

// notCaughtUp is why a gang is not planned before the plugin's informer
// handlers caught up.
const notCaughtUp = "the scheduler started and is still reading NodeTopology objects and the GPUs of bound pods; the gang is retried once it has"

// planStillValid reports whether every open slot's node still exists, is
// not left out for stale or invalid topology, and still has the slot's GPUs
// free by count.
func (p *TopologyPlacement) planStillValid(g *gangPlan, nodes []fwk.NodeInfo) bool {
	return p.planFits(g, nodes, false)
}

// planFits is planStillValid for a gang whose members claim GPUs (claimed)
// or request nvidia.com/gpu.
func (p *TopologyPlacement) planFits(g *gangPlan, nodes []fwk.NodeInfo, claimed bool) bool {
	excluded := p.view.Excluded()
	lookup := p.nodeLookup(nodes)
	return g.Fits(func(name string) (int, bool) {
		ni, ok := lookup(name)
		if _, out := excluded[name]; !ok || out || ni.Node().Spec.Unschedulable {
			return 0, false
		}
		if claimed {
			return p.view.ClaimedFree(name, g.Key()), nodeview.ServedByDRA(ni)
		}
		free := ni.GetAllocatable().GetScalarResources()[lockstep.GPUResource] - ni.GetRequested().GetScalarResources()[lockstep.GPUResource]
		return int(free), true
	})
}

// nodeLookup finds nodes of the cycle by name. Every member of a planned
// gang checks its plan's few nodes: through the scheduler's snapshot, which
// nodes were listed from, that is a map lookup each, where indexing nodes
// would cost a map of every node in the cluster per pod. Without the
// scheduler's snapshot (unit tests give the nodes) nodes are indexed.
func (p *TopologyPlacement) nodeLookup(nodes []fwk.NodeInfo) func(name string) (fwk.NodeInfo, bool) {
	if lister := p.handle.SnapshotSharedLister(); lister != nil {
		infos := lister.NodeInfos()
		return func(name string) (fwk.NodeInfo, bool) {
			ni, err := infos.Get(name)
			return ni, err == nil && ni != nil && ni.Node() != nil
		}
	}
	byName := make(map[string]fwk.NodeInfo, len(nodes))
	for _, ni := range nodes {
		if ni.Node() != nil {
			byName[ni.Node().Name] = ni
		}
	}
	return func(name string) (fwk.NodeInfo, bool) {
		ni, ok := byName[name]
		return ni, ok
	}
}

// planGang computes and records a plan for the pod's gang, timing it by
// outcome. The gang's first attempt is remembered here for the gang wait
// metric and for Preferred constraints.
func (p *TopologyPlacement) planGang(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) (*gangPlan, *rejection) {
	start := p.clock.Now()
	p.gangs.FirstSeen(s.gang, start)
	g, outcome, r := p.plan(ctx, pod, s, nodes)
	p.metrics.planDuration.WithLabelValues(outcome).Observe(p.clock.Since(start).Seconds())
	return g, r
}

// plan is planGang without the timing; outcome is a value of the outcome
// label of plan_duration_seconds. The rules are placement.Decide's; this
// reads their input and carries out the decision.
func (p *TopologyPlacement) plan(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) (g *gangPlan, outcome string, r *rejection) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "podGroup", s.gang)
	// Read before any input, so that a change while planning retires the
	// verdict (verdicts).
	ticket := p.gangs.Verdicts.Begin(gangmanager.GangOf(s.gang))
	p.endDrainIfDue(ctx, s.gang)
	pg, err := p.gangSpec(ctx, pod)
	if apierrors.IsNotFound(err) {
		return nil, outcomeUnschedulable, refused(fmt.Sprintf("PodGroup %s not found", s.gang))
	}
	if err != nil {
		return nil, outcomeError, &rejection{err: err}
	}
	members := p.gangs.ClassMembers(pod, s.req.GPUs)
	if r := mixedRequests(s.gang, members); r != nil {
		return nil, outcomeUnschedulable, r
	}
	req, err := p.request(pg, pod, s, members)
	if err != nil {
		// A bad annotation is the user's to fix; say which and how.
		return nil, outcomeUnschedulable, refused(err.Error())
	}
	snap, err := p.view.Snapshot(pod, s.gang, s.req, nodes)
	if err != nil {
		return nil, outcomeError, &rejection{err: err}
	}
	d := placement.Decide(snap, req, p.policy())
	p.view.Recycle(snap)
	if d.Fallback {
		logger.V(2).Info("Not every pending member fits; planned what minMember needs", "pending", req.Pending, "needed", req.Needed)
	}
	switch d.Verdict {
	case placement.Refused:
		// A bad annotation is the user's to fix; say which and how.
		return nil, outcomeUnschedulable, refused(fmt.Sprintf("PodGroup %s: %s", s.gang, d.Reason))
	case placement.Failed:
		return nil, outcomeError, refused(fmt.Sprintf("PodGroup %s: %s", s.gang, d.Reason))
	case placement.Waiting:
		logger.V(2).Info("Gang does not fit; holding nothing", "reason", d.Reason)
		s.waiting = &waitingGang{gang: d.Gang, priority: corev1helpers.PodPriority(pod), nodes: nodes}
		wait := gangmanager.Decision{Drain: d.Drain, DrainFree: d.DrainFree, Priority: s.waiting.priority}
		if d.Retry {
			wait.RetryIn = func() time.Duration { return p.nextWiden(s.gang) }
		}
		p.reportDrain(ctx, s.gang, d.Drain, d.DrainFree, p.gangs.Apply(s.gang, wait, p.clock.Now()))
		reason := fmt.Sprintf("PodGroup %s: %s", s.gang, d.Reason)
		if victims := p.gangs.WaitingFor(s.gang); len(victims) > 0 {
			// Where the TrainingJob's condition (and kubectl describe)
			// shows it: what the gang waits for.
			reason += fmt.Sprintf("; its preemption waits for %s to terminate", strings.Join(victims, ", "))
		}
		r := refused(reason)
		p.rememberVerdict(ticket, pod, s, req.Wait, r)
		return nil, outcomeUnschedulable, r
	}
	p.gangs.Verdicts.Planned(s.gang)
	logger.V(2).Info("Planned gang", "members", len(d.Plan.Members), "domain", d.Plan.Domain.ID, "level", d.Plan.LevelName, "efficiency", d.Plan.Efficiency)
	// The members the plan was made for, by rank (gangmanager.Manager.SlotOfRank): none is
	// reserved through the new plan yet.
	planned := gangmanager.Decision{Plan: d.Plan}
	if ranks, err := p.gangs.PendingRanks(pod, s.req.GPUs, func(types.UID) bool { return false }); err == nil {
		planned.Ranks = ranks
	}
	a := p.gangs.Apply(s.gang, planned, p.clock.Now())
	p.reportDrain(ctx, s.gang, nil, 0, a)
	return a.Plan, outcomePlanned, nil
}

// reportDrain logs and counts what Apply did with the gang's drains:
// drained d, with free GPUs free, or released its earlier one.
func (p *TopologyPlacement) reportDrain(ctx context.Context, gang string, d *topology.Domain, free int, a gangmanager.Applied) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "podGroup", gang)
	if a.Draining {
		logger.V(2).Info("Draining a domain for the gang", "domain", d.ID, "freeGPUs", free)
	} else if a.Released {
		logger.V(2).Info("Released the gang's drained domain")
	}
	if a.Draining || a.Released {
		p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
	}
}

// releaseDrain releases the gang's drain, if any
// (gangmanager.Manager.ReleaseDrain).
func (p *TopologyPlacement) releaseDrain(ctx context.Context, gang string) {
	if p.gangs.ReleaseDrain(gang) {
		klog.FromContext(ctx).V(2).Info("Released the gang's drained domain", "plugin", Name, "podGroup", gang)
		p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
	}
}

// releaseDrainsOf releases the drains of every size class of the gang
// ("namespace/podgroup"), saying why.
func (p *TopologyPlacement) releaseDrainsOf(ctx context.Context, gang, why string) {
	for _, key := range p.gangs.DrainsOf(gang) {
		klog.FromContext(ctx).V(2).Info("Releasing a drain whose gang no longer waits", "plugin", Name, "podGroup", key, "why", why)
		p.releaseDrain(ctx, key)
	}
}

// releaseDrainIfNoPending releases the drain of a leaving pod's gang when
// none of its pods of that size class waits to be scheduled any more: the
// job was suspended or evicted, its pods deleted (its PodGroup maybe kept),
// and a drain held for nobody would keep a whole domain empty until it
// stalls.
func (p *TopologyPlacement) releaseDrainIfNoPending(ctx context.Context, pod *v1.Pod) {
	key := p.planKey(pod)
	if key == "" || !p.gangs.Books.Drains(key) || p.gangs.HasPendingMember(key) {
		return
	}
	klog.FromContext(ctx).V(2).Info("Releasing a drain whose gang has no pending pod left (suspended or evicted)", "plugin", Name, "podGroup", key, "pod", klog.KObj(pod))
	p.releaseDrain(ctx, key)
}

// request reads what placement.Decide needs of the pod's size class of its
// gang: the members to place (m, from gangmanager.Manager.ClassMembers) beside those placed
// before, what each asks for, the gang's constraint and its wait.
//
// The constraint is the PodGroup's lockstep.dev/topology-* annotations. A
// PodGroup without Lockstep's level annotation (another operator's gang)
// takes it from Kueue TAS's annotations on the member pod, mapped by
// lockstep.KueueTopologyConstraint; Lockstep's own annotations win where
// both are given.
func (p *TopologyPlacement) request(pg *schedv1alpha1.PodGroup, pod *v1.Pod, s *cycleState, m gangmanager.Members) (placement.Request, error) {
	req := placement.Request{
		// All of the class's pending members when they fit; else what
		// minMember still needs, since Coscheduling lets the rest follow
		// later.
		Pending:           max(m.Total-m.Bound, 1),
		Needed:            max(min(m.Total, int(pg.Spec.MinMember))-m.Bound, 1),
		GPUsPerMember:     s.req.GPUs,
		MilliCPUPerMember: s.req.MilliCPU,
		MemoryPerMember:   s.req.Memory,
		Channels:          s.req.Channels,
		Near:              m.BoundNodes,
		Level:             pg.Annotations[lockstep.AnnotationTopologyLevel],
		Mode:              lockstep.ConstraintMode(pg.Annotations[lockstep.AnnotationTopologyMode]),
		Wait:              p.wait(s.gang),
	}
	if req.Level == "" && pod != nil {
		level, mode, ok, err := lockstep.KueueTopologyConstraint(pod.Annotations, p.args.TopologyConfig)
		if err != nil {
			return req, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if ok {
			req.Level, req.Mode = level, mode
		}
	}
	return req, nil
}

// policy is the args as placement.Decide takes them.
func (p *TopologyPlacement) policy() placement.Policy {
	return placement.Policy{
		Topology:      p.args.TopologyConfig,
		DefaultMode:   p.args.DefaultMode,
		TightestFirst: p.args.Unconstrained == TightestFirst,
		PreferredWait: p.args.PreferredWait.Duration,
	}
}

// wait is what the gang manager remembers of the gang for widening, now
// (gangmanager.Manager.Wait).
func (p *TopologyPlacement) wait(gang string) placement.Wait {
	return p.gangs.Wait(gang, p.clock.Now())
}

// nextWiden is how long until the gang may widen one more level
// (placement.Policy.NextWiden).
func (p *TopologyPlacement) nextWiden(gang string) time.Duration {
	return p.policy().NextWiden(p.wait(gang))
}

// endDrainIfDue releases the gang's drain once its domain stalled
// (gangmanager.Manager.EndDrainIfDue).
func (p *TopologyPlacement) endDrainIfDue(ctx context.Context, gang string) {
	// A hold whose victims are stuck past its bound ends here as a drain
	// that stalled, when a member is tried before the sweep saw it: it is
	// said as the sweep says it.
	now := p.clock.Now()
	overdue := len(p.gangs.Books.Overdue(gang, now)) > 0
	stuck := p.gangs.WaitingFor(gang)
	if p.gangs.EndDrainIfDue(gang, now) {
		klog.FromContext(ctx).V(2).Info("Released the gang's drained domain: it freed no GPU for a drainStall", "plugin", Name, "podGroup", gang)
		if overdue {
			p.holdExpired(ctx, gang, stuck)
		}
	}
}

// PreFilterExtensions is nil: the plan does not depend on other pods being
// added or removed during preemption simulation.
func (p *TopologyPlacement) PreFilterExtensions() framework.PreFilterExtensions { return nil }

// rejection is why PreFilter turns a gang member away: a code and its
// reason, or an error. PreFilter answers the framework with its status,
// made in one place (status).
type rejection struct {
	code   fwk.Code
	reason string
	err    error
}

// refused is the rejection of a gang that nothing but a change of its own
// (or of the cluster, which the framework's events retry it on) can make
// fit.
func refused(reason string) *rejection {
	return &rejection{code: fwk.UnschedulableAndUnresolvable, reason: reason}
}

func (r *rejection) status() *fwk.Status {
	if r.err != nil {
		return fwk.AsStatus(r.err)
	}
	return fwk.NewStatus(r.code, r.reason)
}

// claimProblem rejects a gang member whose claims cannot be planned; nil
// when they can.
func claimProblem(gang string, req nodeview.Request) *rejection {
	if req.ClaimProblem == "" || gang == "" {
		return nil
	}
	code := fwk.Unschedulable
	if req.ClaimUnresolvable {
		code = fwk.UnschedulableAndUnresolvable
	}
	return &rejection{code: code, reason: fmt.Sprintf("PodGroup %s: %s", gang, req.ClaimProblem)}
}

// mixedRequests refuses a gang whose GPU members ask for GPUs both through
// nvidia.com/gpu and through claims: the two kinds run on different nodes
// and the gang would be planned as two.
func mixedRequests(gang string, m gangmanager.Members) *rejection {
	if m.ByClaims == 0 || m.ByResource == 0 {
		return nil
	}
	return refused(fmt.Sprintf(
		"PodGroup %s: %d members ask for %s and %d for GPUs through ResourceClaims of DeviceClass %s; a gang asks for GPUs one way",
		gang, m.ByResource, lockstep.GPUResource, m.ByClaims, lockstep.DRAGPUDeviceClass))
}
