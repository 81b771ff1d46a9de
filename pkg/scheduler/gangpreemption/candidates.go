// Package gangpreemption reads what a gang preemption may evict and evicts
// it: the gang-aware counterpart of upstream's framework/preemption
// Evaluator, which DefaultPreemption runs pod by pod. The rules of who is
// evicted are placement.Preempt's; this package turns the scheduler's
// snapshot into its candidates (a PodGroup is one candidate with every live
// pod of it, wherever it runs, so a gang goes whole or not at all) and
// carries out the decision against the API server.
package gangpreemption

import (
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Reader reads a preemption's candidates from the scheduler's snapshot,
// the gang manager's books and the node view.
type Reader struct {
	View  *nodeview.View
	Gangs *gangmanager.Manager
	// MinMember is the minMember of gang ("namespace/podgroup"): a gang
	// started when that many of its members ran (placement.GangStarted).
	// When it is unknown every live member counts.
	MinMember func(gang string) (int, bool)
	// PDBs lists the PodDisruptionBudgets: a candidate whose eviction
	// breaks one is evicted only when nothing else makes room
	// (placement.Victim.PDBViolations). Nil weighs none.
	PDBs policylisters.PodDisruptionBudgetLister
	// Now is the preemption's time: a checkpoint report further ahead of it
	// than lockstep.CheckpointClockSkew is not believed (workLost).
	Now time.Time
}

// Candidates returns the running work of lower priority than the
// preemptor on snap's nodes that it may evict, and the pods of each
// candidate by its Key: the pods of a PodGroup form one candidate with
// every live pod of that PodGroup wherever it runs, so a gang is evicted
// whole or not at all; other pods are candidates alone. Pods being deleted,
// pods evicted for another gang's hold (not counted twice by competing
// preemptors) and the preemptor's own gang are left out; so is a gang one
// of whose pods was evicted already, or does not have lower priority.
func (r Reader) Candidates(preemptor *v1.Pod, priority int32, snap *placement.Snapshot, nodes []fwk.NodeInfo) ([]placement.Victim, map[string][]*v1.Pod) {
	inSnap := make(map[string]*placement.Node, len(snap.Nodes))
	for _, n := range snap.Nodes {
		inSnap[n.Name] = n
	}
	own := gangmanager.GangKey(preemptor)
	gpus := &victimGPUs{r: r, known: map[string]topology.GPUSet{}, channels: r.View.Request(preemptor).Channels}
	var out []placement.Victim
	podsOf := map[string][]*v1.Pod{}
	gangs := map[string]bool{}
	for _, ni := range nodes {
		if ni.Node() == nil || inSnap[ni.Node().Name] == nil {
			continue
		}
		for _, pi := range ni.GetPods() {
			pod := pi.GetPod()
			if corev1helpers.PodPriority(pod) >= priority || pod.DeletionTimestamp != nil || r.Gangs.Books.EvictedFor(pod.UID) {
				continue
			}
			if _, noticed := gangmanager.WaitsOutNotice(pod); noticed {
				// Going already, for a pod outside gangs (a gang's
				// victims are in the books).
				continue
			}
			if g := gangmanager.GangKey(pod); g != "" {
				if g != own {
					gangs[g] = true
				}
				continue
			}
			key := pod.Namespace + "/" + pod.Name
			v := placement.Victim{
				Key: key, Priority: corev1helpers.PodPriority(pod), Started: startedAt(pod),
				Pods: []placement.VictimPod{gpus.victimPod(pod, ni.Node().Name, inSnap)},
			}
			r.workLost(&v, pod)
			out = append(out, v)
			podsOf[key] = []*v1.Pod{pod}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(gangs)) {
		v, pods, ok := r.gangVictim(key, priority, gpus, inSnap)
		if ok {
			out = append(out, v)
			podsOf[key] = pods
		}
	}
	gpus.fill(out, podsOf, nodes, inSnap)
	pdbs := newBudgets(r.PDBs)
	for i := range out {
		out[i].PDBViolations, _ = pdbs.violations(podsOf[out[i].Key])
	}
	return out, podsOf
}

// gangVictim is the candidate of gang key ("namespace/podgroup"): all its
// live pods, at the highest priority among them, started when minMember of
// them ran (placement.GangStarted). It reports false when the gang may not be evicted: a pod
// of it does not have lower priority than the preemptor, or was evicted for
// another gang already (the gang is going whole).
func (r Reader) gangVictim(key string, priority int32, gpus *victimGPUs, inSnap map[string]*placement.Node) (placement.Victim, []*v1.Pod, bool) {
	ns, name, _ := strings.Cut(key, "/")
	listed, err := r.Gangs.GangPods(ns, name)
	if err != nil {
		return placement.Victim{}, nil, false
	}
	v := placement.Victim{Key: key}
	var pods []*v1.Pod
	var starts []time.Time
	for _, pod := range listed {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		prio := corev1helpers.PodPriority(pod)
		if _, noticed := gangmanager.WaitsOutNotice(pod); prio >= priority || noticed || r.Gangs.Books.EvictedFor(pod.UID) {
			return placement.Victim{}, nil, false
		}
		if len(pods) == 0 || prio > v.Priority {
			v.Priority = prio
		}
		node := pod.Spec.NodeName
		if node == "" {
			// Reserved at Permit, or binding: it holds its GPUs there.
			if a, ok := r.Gangs.Books.AssignmentOf(pod.UID); ok {
				node = a.Node
			}
		}
		if started := startedAt(pod); !started.IsZero() {
			starts = append(starts, started)
		}
		v.Pods = append(v.Pods, gpus.victimPod(pod, node, inSnap))
		r.workLost(&v, pod)
		pods = append(pods, pod)
	}
	if len(pods) == 0 {
		return placement.Victim{}, nil, false
	}
	minMember, ok := r.MinMember(key)
	if !ok {
		minMember = len(pods)
	}
	v.Started = placement.GangStarted(starts, minMember)
	return v, pods, true
}

// Resume hands e the notices a scheduler before this one gave victims
// (gangmanager.Noticed), a victim at a time (Evictor.Resume), with their
// pods as pods lists them. A victim's pods are grouped as placement.Preempt
// chose them: a gang's by its PodGroup, a pod outside gangs alone; the
// earliest deadline any of them was given counts.
func (r Reader) Resume(logger klog.Logger, e *Evictor, pods corelisters.PodLister, noticed []gangmanager.Noticed) {
	type group struct {
		pods   []*v1.Pod
		notice lockstep.Notice
		by     lockstep.Preemption
	}
	groups := map[string]*group{}
	var keys []string
	for _, n := range noticed {
		ns, name, _ := strings.Cut(n.Pod, "/")
		pod, err := pods.Pods(ns).Get(name)
		if err != nil || pod.UID != n.UID {
			continue
		}
		key := gangmanager.GangKey(pod)
		if key == "" {
			key = n.Pod
		}
		g := groups[key]
		if g == nil {
			g = &group{notice: n.Notice, by: n.Preemption}
			groups[key] = g
			keys = append(keys, key)
		}
		g.pods = append(g.pods, pod)
		if n.Notice.Deadline.Before(g.notice.Deadline) {
			g.notice = n.Notice
		}
	}
	for _, key := range keys {
		g := groups[key]
		logger.V(2).Info("Taking over the notice a victim of gang preemption was given", "victim", key, "deadline", g.notice.Deadline)
		e.Resume(logger, Victim{Work: r.Noticed(key, g.pods), Pods: g.pods}, g.notice, g.by)
	}
}

// Noticed is victim key, whose pods a scheduler before this one gave
// notice, as far as its eviction is measured (Evictor.Resume): its GPUs
// by count, when it started running whole, its last checkpoint and
// restart overhead.
func (r Reader) Noticed(key string, pods []*v1.Pod) placement.Victim {
	v := placement.Victim{Key: key}
	var starts []time.Time
	for _, pod := range pods {
		n := min(r.View.Request(pod).GPUs, 64)
		v.Pods = append(v.Pods, placement.VictimPod{Node: pod.Spec.NodeName, GPUs: topology.GPUSet(1<<n - 1)})
		if s := startedAt(pod); !s.IsZero() {
			starts = append(starts, s)
		}
		r.workLost(&v, pod)
	}
	minMember, ok := r.MinMember(key)
	if !ok || gangmanager.GangKey(pods[0]) == "" {
		minMember = len(pods)
	}
	v.Started = placement.GangStarted(starts, minMember)
	return v
}

// workLost reads what evicting pod loses into v, one of whose pods it is:
// its checkpoint report (lockstep.AnnotationCheckpoint), the newest of the
// victim's pods' (any rank's checkpoint is the job's: every rank resumes
// from it), and its stated restart overhead
// (lockstep.AnnotationRestartOverhead), the largest. The pods are those of
// the incarnation that runs: an earlier one's are being deleted and left
// out. A report that does not parse, or claims a time ahead of r.Now by
// more than lockstep.CheckpointClockSkew, is not believed, as the
// controller does not (it warns on the job): such a victim is costed by
// its run time.
func (r Reader) workLost(v *placement.Victim, pod *v1.Pod) { readWork(v, pod, r.Now) }

// readWork is workLost at now; the evictor reads it again when it
// evicts.
func readWork(v *placement.Victim, pod *v1.Pod, now time.Time) {
	if raw, ok := pod.Annotations[lockstep.AnnotationCheckpoint]; ok {
		if c, err := lockstep.ParseCheckpoint(raw); err == nil && c.Believable(now) && c.Time.After(v.Checkpointed) {
			v.Checkpointed = c.Time
		}
	}
	if raw, ok := pod.Annotations[lockstep.AnnotationRestartOverhead]; ok {
		if s, err := strconv.ParseInt(raw, 10, 32); err == nil && s > 0 {
			v.RestartOverhead = max(v.RestartOverhead, time.Duration(s)*time.Second)
		}
	}
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
	r Reader
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
	req := g.r.View.Request(pod)
	vp := placement.VictimPod{Node: node, MilliCPU: req.MilliCPU, Memory: req.Memory}
	if g.channels && node != "" && inSnap[node] != nil && len(pod.Spec.ResourceClaims) > 0 {
		vp.Channels = g.r.View.ChannelsHeld(pod, node)
	}
	if node == "" || inSnap[node] == nil {
		return vp
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		// The GPUs its claims' devices are, read from the claims themselves:
		// the books and the agent may lag an allocation, the claim is
		// the allocator's own record. They free once the pod is gone.
		vp.GPUs = g.r.View.GPUsHeld(pod, node)
		g.known[node] |= vp.GPUs
	}
	if req.ResourceGPUs() == 0 {
		return vp
	}
	if a, ok := g.r.Gangs.Books.AssignmentOf(pod.UID); ok && a.Node == node {
		vp.GPUs = a.GPUs
	} else if set, ok := g.r.View.AllocatedTo(node, string(pod.UID)); ok {
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

// OutrankedOn reports whether work the gang's hold could not keep off took
// the plan's room: a pod that outranks priority, asks for GPUs, and landed
// on a node of plan (found by lookup) after the hold was made (since).
// Nothing else can have: a hold keeps off pods of its priority or lower,
// and what ran there before the hold the plan was made around. Every real
// node runs pods that outrank any gang (kube-proxy or the CNI, the device
// plugin, the DCGM exporter, at system-node-critical), and a gang whose
// victims are gone often still does not fit for a while: the scheduler's
// cache learns of the victims' going a moment after the books, and an
// agent reports the GPUs they freed on its resync interval. Spending the
// hold on either would evict a second set of victims for nothing.
func (r Reader) OutrankedOn(plan *placement.Plan, priority int32, since time.Time, lookup func(string) (fwk.NodeInfo, bool)) bool {
	for _, m := range plan.Members {
		ni, ok := lookup(m.Node)
		if !ok {
			continue
		}
		for _, pi := range ni.GetPods() {
			pod := pi.GetPod()
			if corev1helpers.PodPriority(pod) > priority && landed(pod).After(since) && r.View.Request(pod).GPUs > 0 {
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
