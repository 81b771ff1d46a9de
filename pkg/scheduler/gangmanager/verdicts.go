package gangmanager

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// VerdictMaxAge bounds how long a verdict is trusted without an event.
// Every event that can make a gang fit invalidates its verdict first; this
// only bounds the cost of one the rules below would miss to a plan a
// minute per waiting gang.
const VerdictMaxAge = time.Minute

// Verdicts remembers, per gang size class (plan key), that the gang did
// not fit (placement.Waiting), so that its other pending members, and the
// same members retried, are turned away with that verdict instead of a
// snapshot of every node and a plan each: on 25,000 nodes every member of
// a 512-member gang that does not fit replanned from scratch on each retry.
// A plan that fits is never remembered here; the books hold plans.
//
// A verdict holds while nothing it was made from changed, in two parts:
//
//   - epoch counts the events that can make any gang fit: capacity freed
//     (a pod gone or finished, its GPUs forgotten by the books, a plan
//     dropped, a drain or hold ended, NodeTopology reporting GPUs free or a
//     node usable again), and every event the plugin's QueueingHints say
//     Queue for (a node added or changed so that it may take more, a bound
//     pod gone or shrunk, a PodGroup changed). Events that only take
//     capacity (a pod bound, a plan made, a heartbeat) leave it.
//   - changed numbers, per gang, the changes of the gang's own inputs: its
//     PodGroup's spec or constraint, its members added, bound, reserved,
//     changed or gone.
//
// Beside those, a verdict is only reused for a pod that asks for the same
// (requests, priority, tolerations, node selection, Kueue constraint) and
// while the gang's wait allows the same widening (placement.Policy.Widen,
// drain hold and stall), which is what changes it with time alone. The
// topology configuration is the plugin's args, fixed for its life.
//
// Why the hints: the scheduler's snapshot, which a plan reads nodes and
// their pods from, is fed by the scheduler's own informer handlers, which
// may run after the plugin's; an epoch moved by the plugin's handler alone
// could date a verdict made on a snapshot that missed the event. A hint
// runs after the scheduler's cache took the event, for each pod this
// plugin turned away that is unschedulable or in a cycle, so the epoch
// moves again after the cache caught up and before such a pod is retried.
type Verdicts struct {
	epoch atomic.Uint64
	// gen hands out the values of changed: each change gets a new one, so
	// a gang forgotten and seen again never matches an old verdict.
	gen atomic.Uint64

	mu sync.Mutex
	// changed is, per gang (namespace/podgroup), the gen of its last
	// change; 0 when none was seen.
	changed map[string]uint64
	// byKey is the last verdict per plan key.
	byKey map[string]*Verdict
}

// NewVerdicts returns verdicts that remember none yet.
func NewVerdicts() *Verdicts {
	return &Verdicts{changed: map[string]uint64{}, byKey: map[string]*Verdict{}}
}

// VerdictTicket is what a plan attempt read before its inputs: a verdict
// stored under it is stale once either moved.
type VerdictTicket struct {
	epoch, gen uint64
}

// WaitState is what of a gang's wait changes a plan: how far it may widen,
// whether its drain holds it and whether its last drain stalled.
type WaitState struct {
	Widen         int
	Held, Stalled bool
}

// verdict is a gang size class's "does not fit" and what it was made for.
type Verdict struct {
	Ticket VerdictTicket
	Made   time.Time
	Wait   WaitState
	// Pod is the member it was made for; other members reuse it when they
	// ask the same Request (a comparable value: the node view's) and the
	// same placement inputs (samePlacementInputs).
	Pod      *v1.Pod
	Request  any
	Priority int32
	// Code and Reason are the status PreFilter returned.
	Code   fwk.Code
	Reason string
	// Gang is the gang as placement.Decide tried it, for PostFilter.
	Gang placement.Gang
}

// Begin returns the ticket of a plan attempt for gang, read before any of
// its inputs.
func (c *Verdicts) Begin(gang string) VerdictTicket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return VerdictTicket{epoch: c.epoch.Load(), gen: c.changed[gang]}
}

// MayFit retires every verdict: something happened that can make a gang
// fit.
func (c *Verdicts) MayFit() {
	c.epoch.Add(1)
}

// GangChanged retires the verdicts of gang (namespace/podgroup): one of
// its own inputs changed.
func (c *Verdicts) GangChanged(gang string) {
	if gang == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changed[gang] = c.gen.Add(1)
}

// ForgetGang drops what is kept of a gang whose PodGroup is gone.
func (c *Verdicts) ForgetGang(gang string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.changed, gang)
	for key := range c.byKey {
		if GangOf(key) == gang {
			delete(c.byKey, key)
		}
	}
}

// Remember stores v as the verdict of plan key, unless the gang fitted
// since (planned) or v was made from inputs that changed since its ticket.
func (c *Verdicts) Remember(key string, v *Verdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.Ticket.epoch != c.epoch.Load() || v.Ticket.gen != c.changed[GangOf(key)] {
		delete(c.byKey, key)
		return
	}
	c.byKey[key] = v
}

// Planned drops plan key's verdict: the gang fitted.
func (c *Verdicts) Planned(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byKey, key)
}

// Lookup returns plan key's verdict when it still holds for pod, asking
// req, with the gang's wait w at now. A verdict that no longer holds is
// dropped.
func (c *Verdicts) Lookup(key string, pod *v1.Pod, req any, w WaitState, now time.Time) (*Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	if v.Ticket.epoch != c.epoch.Load() || v.Ticket.gen != c.changed[GangOf(key)] ||
		now.Sub(v.Made) >= VerdictMaxAge || v.Wait != w {
		delete(c.byKey, key)
		return nil, false
	}
	if v.Request != req || v.Priority != corev1helpers.PodPriority(pod) || !samePlacementInputs(v.Pod, pod) {
		// Another member asking otherwise is planned for itself, and its
		// verdict replaces this one: a gang of unlike members plans as
		// often as without the cache, never on a verdict not its own.
		return nil, false
	}
	return v, true
}

// samePlacementInputs reports whether pods a and b, of one gang size class
// and asking the same requests and priority, are planned alike: the same
// tolerations, node selection and Kueue constraint (request). Members of
// one gang usually come from one template; the same pod retried is the
// same object.
func samePlacementInputs(a, b *v1.Pod) bool {
	if a == b {
		return true
	}
	for _, k := range []string{lockstep.AnnotationKueueRequiredTopology, lockstep.AnnotationKueuePreferredTopology} {
		va, oka := a.Annotations[k]
		vb, okb := b.Annotations[k]
		if va != vb || oka != okb {
			return false
		}
	}
	return maps.Equal(a.Spec.NodeSelector, b.Spec.NodeSelector) &&
		equality.Semantic.DeepEqual(a.Spec.Tolerations, b.Spec.Tolerations) &&
		equality.Semantic.DeepEqual(a.Spec.Affinity, b.Spec.Affinity)
}

// Len counts the gangs and verdicts c keeps: what a deleted gang must not
// leave behind.
func (c *Verdicts) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey) + len(c.changed)
}

// MemberChanged reports whether an update of a gang's pod changes what
// its gang is planned from, and so retires the gang's verdict
// (Verdicts.GangChanged): the pod was bound, finished, is being deleted,
// or its spec (the apiserver moves a pod's generation on every spec
// change), labels or annotations changed.
func MemberChanged(old, pod *v1.Pod) bool {
	return old.Spec.NodeName != pod.Spec.NodeName || old.Status.Phase != pod.Status.Phase ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) || old.Generation != pod.Generation ||
		!maps.Equal(old.Labels, pod.Labels) || !maps.Equal(old.Annotations, pod.Annotations)
}

// PodGroupChanged reports whether a PodGroup update changes what its gang
// is planned from: its spec (a new generation) or its annotations (the
// topology constraint); status updates do not.
func PodGroupChanged(old, pg *schedv1alpha1.PodGroup) bool {
	return old.Generation != pg.Generation || !maps.Equal(old.Annotations, pg.Annotations) ||
		!equality.Semantic.DeepEqual(old.Spec, pg.Spec)
}
