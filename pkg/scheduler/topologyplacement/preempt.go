package topologyplacement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	apipod "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology"
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

// evictionWorkers bounds the victims evicted at once: a 64-pod gang's
// status patches and deletes go out in a few rounds, not 128 requests at
// once against the API server's priority-and-fairness share of the
// scheduler.
const evictionWorkers = 16

var (
	_ framework.PostFilterPlugin = &TopologyPlacement{}
	_ framework.PreEnqueuePlugin = &TopologyPlacement{}
)

// newDefaultPreemption builds upstream's DefaultPreemption with its default
// args (defaulted by the scheduler's scheme, as an unconfigured plugin's
// are) and the features of the process's feature gates, as kube-scheduler's
// in-tree registry builds it: pods outside gangs are preempted for exactly
// as by the stock scheduler. It runs on handle, the framework of the first
// profile that enabled TopologyPlacement; every profile has the same
// plugins and shares the scheduler's snapshot and queue.
func newDefaultPreemption(ctx context.Context, handle framework.Handle) (*defaultpreemption.DefaultPreemption, error) {
	versioned := &configv1.DefaultPreemptionArgs{}
	scheme.Scheme.Default(versioned)
	args := &config.DefaultPreemptionArgs{}
	if err := scheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("defaulting %s args: %w", defaultpreemption.Name, err)
	}
	return defaultpreemption.New(ctx, args, handle, plfeature.NewSchedulerFeaturesFromGates(feature.DefaultFeatureGate))
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
	if req.Claimed && key != "" {
		// placement.Preempt frees GPUs by NodeTopology index; which
		// claims' devices an eviction frees is not read yet.
		return nil, fwk.NewStatus(fwk.Unschedulable, "gang preemption does not preempt for GPUs asked through ResourceClaims")
	}
	if key == "" {
		if p.defaultPreemption == nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, "preemption for pods outside gangs is not set up")
		}
		return p.defaultPreemption.PostFilter(ctx, state, pod, m)
	}
	pr := p.preemptForGang(ctx, state, pod)
	if pr.err != nil {
		return nil, fwk.AsStatus(pr.err)
	}
	p.metrics.preemptionAttempts.WithLabelValues(pr.outcome).Inc()
	switch pr.outcome {
	case preemptionPreempted, preemptionWaitingForVictims:
		return nominate(pr.node), fwk.NewStatus(fwk.Success)
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
		if p.gangs.Books.PendingVictims(s.gang) > 0 || plan == nil || !p.outrankedOn(plan, s.waiting.priority, since, s.waiting.nodes) {
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
	candidates, podsOf := p.candidates(pod, s.waiting.priority, snap, s.waiting.nodes)
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
	// grace periods and a drain stall after: a victim stuck terminating
	// (its node dark, a finalizer) must not keep the domain closed to
	// equal- and lower-priority work for ever (expireHolds).
	p.gangs.Books.BoundHold(s.gang, now.Add(longestGrace(victims)+p.drainStall()))
	p.gangs.NameVictims(victims)
	p.metrics.drainedNodes.Set(float64(p.gangs.Books.DrainedNodes()))
	if len(released) > 0 {
		logger.V(2).Info("Released the drains of lower-priority gangs in the domain", "podGroup", s.gang, "released", released)
		p.gangs.RetryTurnedAway(s.gang)
	}
	preemptor := gangmanager.GangKey(pod)
	msg := lockstep.Preemption{
		Preemptor: preemptor, Priority: s.waiting.priority, Domain: pre.Plan.Domain.DisplayID(),
		Plan: s.gang, DomainID: pre.Plan.Domain.ID,
	}.Message()
	names := make([]string, len(pre.Victims))
	for i, v := range pre.Victims {
		names[i] = v.Key
		kind := victimPod
		if gangmanager.GangKey(podsOf[v.Key][0]) != "" {
			kind = victimGang
		}
		p.metrics.preemptionVictims.WithLabelValues(kind).Inc()
	}
	p.metrics.preemptionGPUHours.Add(pre.Cost.GPUSeconds / 3600)
	logger.V(2).Info("Preempting for the gang", "podGroup", s.gang, "priority", s.waiting.priority, "domain", pre.Plan.Domain.ID,
		"victims", names, "pods", len(victims), "gpuSeconds", pre.Cost.GPUSeconds)
	p.handle.EventRecorder().Eventf(pod, nil, v1.EventTypeNormal, EventPreempting, "Preempting",
		"Preempting %s in %s for gang %s (priority %d)", strings.Join(names, ", "), pre.Plan.Domain.DisplayID(), preemptor, s.waiting.priority)
	p.evict(logger, pod, victims, msg)
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
		node = p.nominatedNode(pod, gpus, plan)
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
	for _, key := range p.gangs.AdoptPending(tree.Find, p.clock.Now(), p.drainStall()) {
		klog.FromContext(ctx).V(2).Info("Rebuilt the hold of a preemption from its victims", "plugin", Name, "podGroup", key)
		ns, name, _ := gangmanager.SplitPlanKey(key)
		members, err := p.gangPods(ns, name)
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

// outrankedOn reports whether work the gang's hold could not keep off took
// the plan's room: a pod that outranks priority, asks for GPUs, and landed
// on a node of plan after the hold was made (since). Nothing else can
// have: a hold keeps off pods of its priority or lower, and what ran there
// before the hold the plan was made around. Every real node runs pods
// that outrank any gang (kube-proxy or the CNI, the device plugin, the
// DCGM exporter, at system-node-critical), and a gang whose victims are
// gone often still does not fit for a while: the scheduler's cache learns
// of the victims' going a moment after the books, and an agent reports
// the GPUs they freed on its resync interval. Spending the hold on either
// would evict a second set of victims for nothing.
func (p *TopologyPlacement) outrankedOn(plan *placement.Plan, priority int32, since time.Time, nodes []fwk.NodeInfo) bool {
	lookup := p.nodeLookup(nodes)
	for _, m := range plan.Members {
		ni, ok := lookup(m.Node)
		if !ok {
			continue
		}
		for _, pi := range ni.GetPods() {
			pod := pi.GetPod()
			if corev1helpers.PodPriority(pod) > priority && landed(pod).After(since) && p.view.Request(pod).GPUs > 0 {
				return true
			}
		}
	}
	return false
}

// landed is when pod came to its node: when it was scheduled, or created
// for a pod bound at creation (a DaemonSet's, a static pod's).
func landed(pod *v1.Pod) time.Time {
	at := pod.CreationTimestamp.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue && c.LastTransitionTime.After(at) {
			at = c.LastTransitionTime.Time
		}
	}
	return at
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
	members, err := p.gangPods(pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel])
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
	req, err := p.request(pg, pod, s, p.classMembers(pod, s.req.GPUs))
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

// nominatedNode returns pod's node in its gang's preemption plan: its
// rank's slot, or for a pod without a rank a slot from the end by its
// place among the pending members without one, as Reserve fills slots
// (placement.Books.ReserveSlot). Members so nominate the plan's nodes as
// many times as it has slots there: the scheduler counts nominated pods
// of equal or higher priority against a node's room when filtering others,
// members included.
func (p *TopologyPlacement) nominatedNode(pod *v1.Pod, gpus int, plan *placement.Plan) string {
	n := len(plan.Members)
	peers, err := p.pendingPeers(pod, gpus, func(types.UID) bool { return false })
	if err != nil || n == 0 {
		return ""
	}
	slot := 0
	if rank, ok := rankOf(pod); ok {
		var ranks []int
		for _, peer := range peers {
			if r, ok := rankOf(peer); ok {
				ranks = append(ranks, r)
			}
		}
		slices.Sort(ranks)
		slot = gangmanager.RankSlot(ranks, rank)
	} else {
		for _, peer := range peers {
			if _, ranked := rankOf(peer); !ranked && peer.Name < pod.Name {
				slot++
			}
		}
		slot = n - 1 - slot
	}
	return plan.Members[min(max(slot, 0), n-1)].Node
}

// candidates returns the running work of lower priority than the
// preemptor on snap's nodes that it may evict, and the pods of each
// candidate by its Key: the pods of a PodGroup form one candidate with
// every live pod of that PodGroup wherever it runs, so a gang is evicted
// whole or not at all; other pods are candidates alone. Pods being deleted,
// pods evicted for another gang's hold (not counted twice by competing
// preemptors) and the preemptor's own gang are left out; so is a gang one
// of whose pods was evicted already, or does not have lower priority.
func (p *TopologyPlacement) candidates(preemptor *v1.Pod, priority int32, snap *placement.Snapshot, nodes []fwk.NodeInfo) ([]placement.Victim, map[string][]*v1.Pod) {
	inSnap := make(map[string]*placement.Node, len(snap.Nodes))
	for _, n := range snap.Nodes {
		inSnap[n.Name] = n
	}
	own := gangmanager.GangKey(preemptor)
	gpus := &victimGPUs{p: p, known: map[string]topology.GPUSet{}, channels: p.view.Request(preemptor).Channels}
	var out []placement.Victim
	podsOf := map[string][]*v1.Pod{}
	gangs := map[string]bool{}
	for _, ni := range nodes {
		if ni.Node() == nil || inSnap[ni.Node().Name] == nil {
			continue
		}
		for _, pi := range ni.GetPods() {
			pod := pi.GetPod()
			if corev1helpers.PodPriority(pod) >= priority || pod.DeletionTimestamp != nil || p.gangs.Books.EvictedFor(pod.UID) {
				continue
			}
			if g := gangmanager.GangKey(pod); g != "" {
				if g != own {
					gangs[g] = true
				}
				continue
			}
			key := pod.Namespace + "/" + pod.Name
			out = append(out, placement.Victim{
				Key: key, Priority: corev1helpers.PodPriority(pod), Started: startedAt(pod),
				Pods: []placement.VictimPod{gpus.victimPod(pod, ni.Node().Name, inSnap)},
			})
			podsOf[key] = []*v1.Pod{pod}
		}
	}
	keys := make([]string, 0, len(gangs))
	for g := range gangs {
		keys = append(keys, g)
	}
	slices.Sort(keys)
	for _, key := range keys {
		v, pods, ok := p.gangVictim(key, priority, gpus, inSnap)
		if ok {
			out = append(out, v)
			podsOf[key] = pods
		}
	}
	gpus.fill(out, podsOf, nodes, inSnap)
	return out, podsOf
}

// gangVictim is the candidate of gang key ("namespace/podgroup"): all its
// live pods, at the highest priority among them, started when the last of
// them started. It reports false when the gang may not be evicted: a pod
// of it does not have lower priority than the preemptor, or was evicted for
// another gang already (the gang is going whole).
func (p *TopologyPlacement) gangVictim(key string, priority int32, gpus *victimGPUs, inSnap map[string]*placement.Node) (placement.Victim, []*v1.Pod, bool) {
	ns, name, _ := strings.Cut(key, "/")
	listed, err := p.gangPods(ns, name)
	if err != nil {
		return placement.Victim{}, nil, false
	}
	v := placement.Victim{Key: key}
	var pods []*v1.Pod
	allStarted := true
	for _, pod := range listed {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		prio := corev1helpers.PodPriority(pod)
		if prio >= priority || p.gangs.Books.EvictedFor(pod.UID) {
			return placement.Victim{}, nil, false
		}
		if len(pods) == 0 || prio > v.Priority {
			v.Priority = prio
		}
		node := pod.Spec.NodeName
		if node == "" {
			// Reserved at Permit, or binding: it holds its GPUs there.
			if r, ok := p.gangs.Books.AssignmentOf(pod.UID); ok {
				node = r.Node
			}
		}
		started := startedAt(pod)
		if started.IsZero() {
			allStarted = false
		} else if started.After(v.Started) {
			v.Started = started
		}
		v.Pods = append(v.Pods, gpus.victimPod(pod, node, inSnap))
		pods = append(pods, pod)
	}
	if len(pods) == 0 {
		return placement.Victim{}, nil, false
	}
	if !allStarted {
		v.Started = time.Time{}
	}
	return v, pods, true
}

// startedAt is when the pod started running, zero when it has not.
func startedAt(pod *v1.Pod) time.Time {
	if pod.Status.StartTime == nil {
		return time.Time{}
	}
	return pod.Status.StartTime.Time
}

// victimGPUs finds the GPUs candidate pods hold: their reservation in the
// books (reported by the node's agent, or chosen by the scheduler), else
// what the node's NodeTopology reports allocated to them. A pod known by
// its GPU count only (its allocation not reported yet) is given, in fill,
// the highest-indexed of its node's GPUs that no known pod holds and are
// not free: the ones the planner's snapshot takes out of the free GPUs for
// such pods.
type victimGPUs struct {
	p *TopologyPlacement
	// known are the GPUs of the candidates found so far, by node.
	known map[string]topology.GPUSet
	// unknown are the candidate pods whose GPUs are known by count.
	unknown []unknownGPUs
	// channels says the preemptor claims ComputeDomain channels: only
	// then are the victims' channels read.
	channels bool
}

type unknownGPUs struct {
	node string
	pod  types.UID
	gpus int
}

// victimPod describes pod, running on node, as a VictimPod. Pods off the
// snapshot's nodes free nothing the preemptor could use: their GPUs are
// not looked up.
func (g *victimGPUs) victimPod(pod *v1.Pod, node string, inSnap map[string]*placement.Node) placement.VictimPod {
	req := g.p.view.Request(pod)
	vp := placement.VictimPod{Node: node, MilliCPU: req.MilliCPU, Memory: req.Memory}
	if g.channels && node != "" && inSnap[node] != nil && len(pod.Spec.ResourceClaims) > 0 {
		vp.Channels = g.p.view.ChannelsHeld(pod, node)
	}
	// Only GPUs of nvidia.com/gpu are freed by count: which of a node's
	// GPUs a claim's devices are is not read for victims.
	if node == "" || inSnap[node] == nil || req.ResourceGPUs() == 0 {
		return vp
	}
	if r, ok := g.p.gangs.Books.AssignmentOf(pod.UID); ok && r.Node == node {
		vp.GPUs = r.GPUs
	} else if set, ok := g.p.view.AllocatedTo(node, string(pod.UID)); ok {
		vp.GPUs = set
	} else {
		g.unknown = append(g.unknown, unknownGPUs{node: node, pod: pod.UID, gpus: req.GPUs})
		return vp
	}
	g.known[node] |= vp.GPUs
	return vp
}

// fill gives the candidates' pods known by GPU count their GPUs (see
// victimGPUs); podsOf holds each candidate's pods in the order of its
// VictimPods.
func (g *victimGPUs) fill(victims []placement.Victim, podsOf map[string][]*v1.Pod, nodes []fwk.NodeInfo, inSnap map[string]*placement.Node) {
	if len(g.unknown) == 0 {
		return
	}
	count := map[string]int{}
	for _, ni := range nodes {
		if n := ni.Node(); n != nil && inSnap[n.Name] != nil {
			count[n.Name] = int(ni.GetAllocatable().GetScalarResources()[lockstep.GPUResource])
		}
	}
	given := make(map[types.UID]topology.GPUSet, len(g.unknown))
	for _, u := range g.unknown {
		left := topology.AllGPUs(min(count[u.node], topology.MaxGPUs)) &^ inSnap[u.node].FreeGPUs &^ g.known[u.node]
		var set topology.GPUSet
		for i := 0; i < u.gpus && left != 0; i++ {
			top := topology.GPUSet(1) << (63 - bits.LeadingZeros64(uint64(left)))
			set |= top
			left &^= top
		}
		g.known[u.node] |= set
		given[u.pod] = set
	}
	for i := range victims {
		for j, pod := range podsOf[victims[i].Key] {
			if set, ok := given[pod.UID]; ok {
				victims[i].Pods[j].GPUs = set
			}
		}
	}
}

// evict evicts the victims of a preemption for preemptor's gang, off the
// scheduling thread: each pod gets a DisruptionTarget condition whose
// message (lockstep.Preemption) tells the controller who preempted it, is
// deleted with its own termination grace period (the trainer checkpoints
// on SIGTERM), and gets an event naming the preemptor. The hold waits for
// each victim's deletion event (victimGone), except for a pod found gone
// already, whose event may have come before the hold, and a pod that could
// not be evicted (logged and counted), which is not going: the hold stops
// waiting for both, and once it waits for none the domain is held as a
// drain, which ends when it stops freeing GPUs.
func (p *TopologyPlacement) evict(logger klog.Logger, preemptor *v1.Pod, victims []*v1.Pod, msg string) {
	cs, recorder := p.handle.ClientSet(), p.handle.EventRecorder()
	ctx := klog.NewContext(context.Background(), logger)
	failed := func(victim *v1.Pod, err error, what string) {
		// Gone, or replaced by a pod of the same name (a new incarnation
		// of its job): the victim is not there to evict.
		if !apierrors.IsNotFound(err) && !replaced(err) {
			logger.Error(err, what, "victim", klog.KObj(victim))
			p.metrics.evictionErrors.Inc()
		}
		p.victimGone(ctx, victim)
	}
	go workqueue.ParallelizeUntil(ctx, evictionWorkers, len(victims), func(i int) {
		victim := victims[i]
		condition := &v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: apipod.CalculatePodConditionObservedGeneration(&victim.Status, victim.Generation, v1.DisruptionTarget),
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonPreemptionByScheduler,
			Message:            msg,
		}
		status := victim.Status.DeepCopy()
		if apipod.UpdatePodCondition(status, condition) {
			if err := patchVictimStatus(ctx, cs, victim, status); err != nil {
				// Deleted without the condition, the controller would
				// count the restart as a failure: the pod is left running.
				failed(victim, err, "Could not mark a victim of gang preemption; not deleting it")
				return
			}
		}
		err := cs.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(victim.UID))})
		if err != nil {
			failed(victim, err, "Could not delete a victim of gang preemption")
			return
		}
		logger.V(2).Info("Evicted a victim of gang preemption", "victim", klog.KObj(victim), "node", victim.Spec.NodeName)
		recorder.Eventf(victim, preemptor, v1.EventTypeNormal, EventPreempted, "Preempting", "%s", msg)
	})
}

// patchVictimStatus patches victim's status to status, only if the pod of
// that name is still the victim: the patch carries its UID, which the
// apiserver refuses to change. TrainingJob pods keep their names across
// incarnations, so a patch by name alone could mark the job's next
// incarnation.
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

// longestGrace is the longest termination grace period of pods, as the
// kubelet gives them when they are deleted with the default options.
func longestGrace(pods []*v1.Pod) time.Duration {
	longest := time.Duration(0)
	for _, pod := range pods {
		grace := int64(v1.DefaultTerminationGracePeriodSeconds)
		if pod.Spec.TerminationGracePeriodSeconds != nil {
			grace = *pod.Spec.TerminationGracePeriodSeconds
		}
		longest = max(longest, time.Duration(grace)*time.Second)
	}
	return longest
}

// expireHolds says which victims each hold waited for past its bound
// (BoundHold), in an event on the preemptor's PodGroup, the log and
// preemption_holds_expired_total; the sweep's ExpireDrains then releases
// the domain. Those victims stay evicted for the gang and are never its
// or another gang's candidates again; the gang is retried, and may
// preempt elsewhere.
func (p *TopologyPlacement) expireHolds(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name)
	now := p.clock.Now()
	for _, h := range p.gangs.Books.Holds() {
		if len(p.gangs.Books.Overdue(h.Gang, now)) == 0 {
			continue
		}
		stuck := p.gangs.WaitingFor(h.Gang)
		logger.Info("Releasing the domain of a preemption whose victims are still terminating past the hold's bound", "podGroup", h.Gang, "domain", h.Domain, "victims", stuck)
		p.metrics.holdsExpired.Inc()
		ns, name, ok := gangmanager.SplitPlanKey(h.Gang)
		if !ok {
			continue
		}
		pg := &schedv1alpha1.PodGroup{}
		if err := p.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pg); err != nil {
			continue
		}
		p.handle.EventRecorder().Eventf(pg, nil, v1.EventTypeWarning, EventHoldExpired, "Preempting",
			"Released the domain held for the gang's preemption: %s still terminating past the hold's bound (the victims' grace period and %s)", strings.Join(stuck, ", "), p.drainStall())
	}
}
