package topologyplacement

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// stateKey keys this plugin's data in the CycleState.
const stateKey fwk.StateKey = Name

// cycleState is what PreFilter computed for the pod being scheduled.
type cycleState struct {
	// gang is namespace/podgroup, or "" for a pod outside gangs.
	gang string
	req  memberRequest
	// plan is the gang's plan; nil outside gangs.
	plan *gangPlan
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
	s := &cycleState{gang: planKey(pod), req: requestOf(pod)}
	state.Write(stateKey, s)
	if s.gang == "" {
		return nil, nil
	}
	g, ok := p.books.get(s.gang)
	if ok && !p.planStillValid(g, nodes) {
		logger.V(2).Info("Plan invalidated: a planned node is gone or taken", "podGroup", s.gang)
		p.invalidate(s.gang, dropNodeUnavailable)
		ok = false
	}
	if !ok {
		var status *fwk.Status
		if g, status = p.planGang(ctx, pod, s, nodes); !status.IsSuccess() {
			p.turnedAway.add(s.gang)
			return nil, status
		}
		p.turnedAway.remove(s.gang)
	}
	s.plan = g
	open := sets.New(g.OpenNodes()...)
	if open.Len() == 0 {
		// More pods of this size than the plan holds (minMember below the
		// replica count, as in elastic jobs): the extra ones are scheduled as
		// usual, off the GPUs plans hold.
		s.plan = nil
		return nil, nil
	}
	return &framework.PreFilterResult{NodeNames: open}, nil
}

// planStillValid reports whether every open slot's node still exists, is
// not left out for stale or invalid topology, and still has the slot's GPUs
// free by count.
func (p *TopologyPlacement) planStillValid(g *gangPlan, nodes []fwk.NodeInfo) bool {
	excluded := p.health.refresh()
	lookup := p.nodeLookup(nodes)
	return g.Fits(func(name string) (int, bool) {
		ni, ok := lookup(name)
		if _, out := excluded[name]; !ok || out || ni.Node().Spec.Unschedulable {
			return 0, false
		}
		free := ni.GetAllocatable().GetScalarResources()[lockstep.GPUResource] - ni.GetRequested().GetScalarResources()[lockstep.GPUResource]
		return int(free), true
	})
}

// nodeLookup finds nodes of the cycle by name. Every member of a planned
// gang checks its plan's few nodes: through the scheduler's snapshot, which
// nodes were listed from, that is a map lookup each, where indexing nodes
// would cost a map of every node in the cluster per pod. Without a
// framework (unit tests) nodes are indexed.
func (p *TopologyPlacement) nodeLookup(nodes []fwk.NodeInfo) func(name string) (fwk.NodeInfo, bool) {
	if p.handle != nil {
		if lister := p.handle.SnapshotSharedLister(); lister != nil {
			infos := lister.NodeInfos()
			return func(name string) (fwk.NodeInfo, bool) {
				ni, err := infos.Get(name)
				return ni, err == nil && ni != nil && ni.Node() != nil
			}
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
func (p *TopologyPlacement) planGang(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) (*gangPlan, *fwk.Status) {
	start := p.clock.Now()
	p.firstSeen.firstSeen(s.gang, start)
	g, outcome, status := p.plan(ctx, pod, s, nodes)
	p.metrics.planDuration.WithLabelValues(outcome).Observe(p.clock.Since(start).Seconds())
	return g, status
}

// plan is planGang without the timing; outcome is a value of the outcome
// label of plan_duration_seconds.
func (p *TopologyPlacement) plan(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) (g *gangPlan, outcome string, status *fwk.Status) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "podGroup", s.gang)
	pg, err := p.gangSpec(ctx, pod)
	if apierrors.IsNotFound(err) {
		return nil, outcomeUnschedulable, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s not found", s.gang))
	}
	if err != nil {
		return nil, outcomeError, fwk.AsStatus(err)
	}
	gang, err := p.gangRequest(pg, s)
	if err == nil {
		// The plan places this pod's size class: the gang's pods that ask for
		// as many GPUs, at most minMember of them, less those already bound
		// (by a scheduler instance before a restart).
		total, bound := p.classMembers(pod, s.req.gpus)
		gang.Members = max(min(total, int(pg.Spec.MinMember))-bound, 1)
	}
	if err != nil {
		// A bad annotation is the user's to fix; say which and how.
		return nil, outcomeUnschedulable, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	snap, err := p.snapshot(pod, s.gang, nodes)
	if err != nil {
		return nil, outcomeError, fwk.AsStatus(err)
	}
	plan, err := placement.Place(snap, gang, placement.Options{})
	var unschedulable *placement.Unschedulable
	if errors.As(err, &unschedulable) {
		logger.V(2).Info("Gang does not fit; holding nothing", "reason", unschedulable.Reason)
		return nil, outcomeUnschedulable, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s: %s", s.gang, unschedulable.Reason))
	}
	if err != nil {
		return nil, outcomeError, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s: %v", s.gang, err))
	}
	logger.V(2).Info("Planned gang", "members", len(plan.Members), "domain", plan.Domain.ID, "level", plan.LevelName, "efficiency", plan.Efficiency)
	return p.books.add(s.gang, plan, p.clock.Now()), outcomePlanned, nil
}

// classMembers counts the gang's pods that ask for gpus GPUs, and how many
// of them are bound.
func (p *TopologyPlacement) classMembers(pod *v1.Pod, gpus int) (total, bound int) {
	selector := labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: pod.Labels[schedv1alpha1.PodGroupLabel]})
	pods, err := p.handle.SharedInformerFactory().Core().V1().Pods().Lister().Pods(pod.Namespace).List(selector)
	if err != nil {
		return 1, 0
	}
	for _, member := range pods {
		if member.Status.Phase == v1.PodSucceeded || member.Status.Phase == v1.PodFailed || requestOf(member).gpus != gpus {
			continue
		}
		total++
		if member.Spec.NodeName != "" {
			bound++
		}
	}
	return max(total, 1), bound
}

// gangRequest turns a PodGroup and a member's request into the planner's
// Gang, with the constraint of its annotations widened by one level per
// PreferredWait a Preferred gang has waited. The planner counts the widening
// from the narrowest level that could ever hold the gang, so no wait is
// spent on levels too small for it.
func (p *TopologyPlacement) gangRequest(pg *schedv1alpha1.PodGroup, s *cycleState) (placement.Gang, error) {
	gang := placement.Gang{
		Members:           int(pg.Spec.MinMember),
		GPUsPerMember:     s.req.gpus,
		MilliCPUPerMember: s.req.milliCPU,
		MemoryPerMember:   s.req.memory,
		Level:             pg.Annotations[lockstep.AnnotationTopologyLevel],
		Mode:              lockstep.ConstraintMode(pg.Annotations[lockstep.AnnotationTopologyMode]),
	}
	if gang.Members < 1 {
		gang.Members = 1
	}
	if gang.Level == "" {
		return gang, nil
	}
	levelIndex := -1
	names := make([]string, len(p.args.Levels))
	for i, l := range p.args.Levels {
		names[i] = l.Name
		if l.Name == gang.Level {
			levelIndex = i
		}
	}
	if levelIndex < 0 {
		return gang, fmt.Errorf("PodGroup %s: annotation %s=%q names no configured level; use one of %s",
			s.gang, lockstep.AnnotationTopologyLevel, gang.Level, strings.Join(names, ", "))
	}
	switch gang.Mode {
	case "":
		gang.Mode = p.args.DefaultMode
	case lockstep.Required, lockstep.Preferred:
	default:
		return gang, fmt.Errorf("PodGroup %s: annotation %s=%q must be Required or Preferred", s.gang, lockstep.AnnotationTopologyMode, gang.Mode)
	}
	if gang.Mode == lockstep.Preferred {
		waited := p.clock.Since(p.firstSeen.firstSeen(s.gang, p.clock.Now()))
		if wait := p.args.PreferredWait.Duration; wait > 0 && waited > 0 {
			gang.Widen = int(waited / wait)
		}
	}
	return gang, nil
}

// PreFilterExtensions is nil: the plan does not depend on other pods being
// added or removed during preemption simulation.
func (p *TopologyPlacement) PreFilterExtensions() framework.PreFilterExtensions { return nil }
