package gangmanager

import (
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// What the manager reads of a gang's pods, as Coscheduling's core.Manager
// reads them to count a PodGroup's members: through the scheduler's pod
// cache (Config.Pods), each pod sized by the node view's count of its GPUs
// (Config.Size). The pods are the cache's: read them, never modify them.

// GangPods returns the pods of PodGroup name in namespace ns.
func (m *Manager) GangPods(ns, name string) ([]*v1.Pod, error) {
	return m.pods(ns, name)
}

// PlanKey is the plan key of pod, its GPUs counted as the node view counts
// them (PlanKey).
func (m *Manager) PlanKey(pod *v1.Pod) string {
	return PlanKey(pod, m.gpus(pod))
}

// Members is what the books need to know of a gang's pods of one size
// class.
type Members struct {
	// Total counts the class's live pods, at least 1; Bound those bound or
	// reserved.
	Total, Bound int
	// BoundNodes are the nodes of every bound or reserved live member of
	// the gang, whatever it asks for: where a new plan should stay close to.
	BoundNodes []string
	// ByClaims and ByResource count the gang's live members that ask for
	// GPUs through claims and through nvidia.com/gpu: a gang asks one
	// way.
	ByClaims, ByResource int
}

// ClassMembers counts the live pods of pod's gang that ask for gpus GPUs,
// and how many of them are bound or reserved.
func (m *Manager) ClassMembers(pod *v1.Pod, gpus int) Members {
	pods, err := m.pods(pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel])
	if err != nil {
		return Members{Total: 1}
	}
	var c Members
	for _, member := range pods {
		if ended(member) || member.DeletionTimestamp != nil {
			continue
		}
		// A member reserved on a node, waiting at Permit or binding, is as
		// good as bound: it has its GPUs and needs no slot.
		node := member.Spec.NodeName
		if node == "" && member.UID != pod.UID {
			if r, ok := m.Books.AssignmentOf(member.UID); ok {
				node = r.Node
			}
		}
		if node != "" {
			c.BoundNodes = append(c.BoundNodes, node)
		}
		n, claimed := m.size(member)
		switch {
		case claimed:
			c.ByClaims++
		case n > 0:
			c.ByResource++
		}
		if n != gpus {
			continue
		}
		c.Total++
		if node != "" {
			c.Bound++
		}
	}
	c.Total = max(c.Total, 1)
	return c
}

// PendingPeers returns the other members of pod's gang that ask for gpus
// GPUs and wait to be placed: unbound, not being deleted, not finished, and
// not reserved through another plan than the one inPlan tells the slots of.
func (m *Manager) PendingPeers(pod *v1.Pod, gpus int, inPlan func(types.UID) bool) ([]*v1.Pod, error) {
	pods, err := m.pods(pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel])
	if err != nil {
		return nil, err
	}
	var out []*v1.Pod
	for _, member := range pods {
		if member.UID == pod.UID || member.Spec.NodeName != "" || member.DeletionTimestamp != nil || ended(member) || m.gpus(member) != gpus {
			continue
		}
		if _, reserved := m.Books.AssignmentOf(member.UID); reserved && !inPlan(member.UID) {
			continue
		}
		out = append(out, member)
	}
	return out, nil
}

// PendingRanks returns the ranks of pod's gang's members that rank → slot
// gives slots by (RankSlot): pod's and those of its PendingPeers,
// ascending.
func (m *Manager) PendingRanks(pod *v1.Pod, gpus int, inPlan func(types.UID) bool) ([]int, error) {
	peers, err := m.PendingPeers(pod, gpus, inPlan)
	if err != nil {
		return nil, err
	}
	var ranks []int
	for _, member := range append(peers, pod) {
		if r, ok := RankOf(member); ok {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	return ranks, nil
}

// RankOf reads a pod's lockstep.dev/rank annotation.
func RankOf(pod *v1.Pod) (int, bool) {
	v, ok := pod.Annotations[lockstep.AnnotationRank]
	if !ok {
		return 0, false
	}
	r, err := strconv.Atoi(v)
	return r, err == nil && r >= 0
}

// SlotOfRank returns the plan slot of pod's rank (its lockstep.dev/rank
// annotation) in g, or -1 when it has none or the plan has no slot for it.
// The plan's slots are in topology order (placement.RankOrder) and hold the
// gang's pending members of the pod's size class (ClassMembers: neither
// bound nor reserved through an earlier plan), so rank r takes the slot
// after those of the lower ranks among them: the r-th when the class holds
// every rank and none is bound, as in a fresh PyTorch or MPI gang.
//
// The members' ranks are read once per plan, when it is made (Apply with
// Decision.Ranks), not for each member: listing and sizing the gang's pods
// on every member's PreFilter cost O(gang²) per gang.
func (m *Manager) SlotOfRank(pod *v1.Pod, gpus int, g *Plan) int {
	rank, ok := RankOf(pod)
	if !ok {
		return -1
	}
	slots, ok := m.Books.RankSlotsOf(g)
	if !ok {
		// A plan added without its ranks: read them now, the members
		// reserved through it among them.
		ranks, err := m.PendingRanks(pod, gpus, func(uid types.UID) bool { _, here := g.SlotOf(string(uid)); return here })
		if err != nil {
			return -1
		}
		slots = m.Books.SetRankSlots(g, ranks)
	}
	return slots.Slot(rank)
}

// NodeInPlan returns pod's node in its gang's preemption plan: its rank's
// slot, or for a pod without a rank a slot from the end by its place among
// the pending members without one, as Reserve fills slots
// (placement.Books.ReserveSlot). Members so nominate the plan's nodes as
// many times as it has slots there: the scheduler counts nominated pods of
// equal or higher priority against a node's room when filtering others,
// members included.
func (m *Manager) NodeInPlan(pod *v1.Pod, gpus int, plan *placement.Plan) string {
	n := len(plan.Members)
	peers, err := m.PendingPeers(pod, gpus, func(types.UID) bool { return false })
	if err != nil || n == 0 {
		return ""
	}
	slot := 0
	if rank, ok := RankOf(pod); ok {
		var ranks []int
		for _, peer := range peers {
			if r, ok := RankOf(peer); ok {
				ranks = append(ranks, r)
			}
		}
		slices.Sort(ranks)
		slot = RankSlot(ranks, rank)
	} else {
		for _, peer := range peers {
			if _, ranked := RankOf(peer); !ranked && peer.Name < pod.Name {
				slot++
			}
		}
		slot = n - 1 - slot
	}
	return plan.Members[min(max(slot, 0), n-1)].Node
}

// HasPendingMember reports whether some pod of gang size class key still waits
// to be scheduled: unbound and not being deleted.
func (m *Manager) HasPendingMember(key string) bool {
	pods, err := m.podsOf(key)
	if err != nil {
		// Unknown: keep what waits on it.
		return true
	}
	return PendingMember(pods, key, m.PlanKey)
}

// PendingMember reports whether some pod of gang size class key, by the
// pods' plan keys from keyOf, still waits to be scheduled: unbound and not
// being deleted.
func PendingMember(pods []*v1.Pod, key string, keyOf func(*v1.Pod) string) bool {
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && keyOf(pod) == key {
			return true
		}
	}
	return false
}

// Unbound returns the pods of gang key (a plan key or namespace/podgroup)
// that are unbound and not being deleted, by namespace/name: the ones a
// retry puts back in the scheduler's active queue.
func (m *Manager) Unbound(key string) map[string]*v1.Pod {
	pods, err := m.podsOf(key)
	if err != nil {
		return nil
	}
	unbound := map[string]*v1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			unbound[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	return unbound
}

// ended reports whether pod finished.
func ended(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// gpus is how many GPUs pod asks for, as the node view counts them.
func (m *Manager) gpus(pod *v1.Pod) int {
	n, _ := m.size(pod)
	return n
}

// podsOf returns the pods of the gang of key (a plan key or
// namespace/podgroup); a key that names no gang has none.
func (m *Manager) podsOf(key string) ([]*v1.Pod, error) {
	ns, name, ok := SplitPlanKey(key)
	if !ok {
		return nil, nil
	}
	return m.pods(ns, name)
}
