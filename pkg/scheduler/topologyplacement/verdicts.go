package topologyplacement

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// verdictMaxAge bounds how long a verdict is trusted without an event.
// Every event that can make a gang fit invalidates its verdict first; this
// only bounds the cost of one the rules below would miss to a plan a
// minute per waiting gang.
const verdictMaxAge = time.Minute

// verdicts remembers, per gang size class (plan key), that the gang did
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
//
// A nil *verdicts (unit tests of other things) remembers nothing.
type verdicts struct {
	epoch atomic.Uint64
	// gen hands out the values of changed: each change gets a new one, so
	// a gang forgotten and seen again never matches an old verdict.
	gen atomic.Uint64

	mu sync.Mutex
	// changed is, per gang (namespace/podgroup), the gen of its last
	// change; 0 when none was seen.
	changed map[string]uint64
	// byKey is the last verdict per plan key.
	byKey map[string]*verdict
}

func newVerdicts() *verdicts {
	return &verdicts{changed: map[string]uint64{}, byKey: map[string]*verdict{}}
}

// verdictTicket is what a plan attempt read before its inputs: a verdict
// stored under it is stale once either moved.
type verdictTicket struct {
	epoch, gen uint64
}

// waitState is what of a gang's wait changes a plan: how far it may widen,
// whether its drain holds it and whether its last drain stalled.
type waitState struct {
	widen         int
	held, stalled bool
}

// verdict is a gang size class's "does not fit" and what it was made for.
type verdict struct {
	ticket verdictTicket
	made   time.Time
	wait   waitState
	// pod is the member it was made for; other members reuse it when they
	// ask the same (samePlacementInputs).
	pod      *v1.Pod
	req      nodeview.Request
	priority int32
	// code and reason are the status PreFilter returned.
	code   fwk.Code
	reason string
	// gang is the gang as placement.Decide tried it, for PostFilter.
	gang placement.Gang
}

// begin returns the ticket of a plan attempt for gang, read before any of
// its inputs.
func (c *verdicts) begin(gang string) verdictTicket {
	if c == nil {
		return verdictTicket{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return verdictTicket{epoch: c.epoch.Load(), gen: c.changed[gang]}
}

// mayFit retires every verdict: something happened that can make a gang
// fit.
func (c *verdicts) mayFit() {
	if c != nil {
		c.epoch.Add(1)
	}
}

// gangChanged retires the verdicts of gang (namespace/podgroup): one of
// its own inputs changed.
func (c *verdicts) gangChanged(gang string) {
	if c == nil || gang == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changed[gang] = c.gen.Add(1)
}

// forgetGang drops what is kept of a gang whose PodGroup is gone.
func (c *verdicts) forgetGang(gang string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.changed, gang)
	for key := range c.byKey {
		if gangOfPlanKey(key) == gang {
			delete(c.byKey, key)
		}
	}
}

// remember stores v as the verdict of plan key, unless the gang fitted
// since (planned) or v was made from inputs that changed since its ticket.
func (c *verdicts) remember(key string, v *verdict) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.ticket.epoch != c.epoch.Load() || v.ticket.gen != c.changed[gangOfPlanKey(key)] {
		delete(c.byKey, key)
		return
	}
	c.byKey[key] = v
}

// planned drops plan key's verdict: the gang fitted.
func (c *verdicts) planned(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byKey, key)
}

// lookup returns plan key's verdict when it still holds for pod, asking
// req, with the gang's wait w at now. A verdict that no longer holds is
// dropped.
func (c *verdicts) lookup(key string, pod *v1.Pod, req nodeview.Request, w waitState, now time.Time) (*verdict, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	if v.ticket.epoch != c.epoch.Load() || v.ticket.gen != c.changed[gangOfPlanKey(key)] ||
		now.Sub(v.made) >= verdictMaxAge || v.wait != w {
		delete(c.byKey, key)
		return nil, false
	}
	if v.req != req || v.priority != corev1helpers.PodPriority(pod) || !samePlacementInputs(v.pod, pod) {
		// Another member asking otherwise is planned for itself, and its
		// verdict replaces this one: a gang of unlike members plans as
		// often as without the cache, never on a verdict not its own.
		return nil, false
	}
	return v, true
}

// gangOfPlanKey is the gang (namespace/podgroup) of a plan key.
func gangOfPlanKey(key string) string {
	gang, _, _ := strings.Cut(key, "#")
	return gang
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

// waitStateOf is what of w changes a plan (waitState).
func (p *TopologyPlacement) waitStateOf(w placement.Wait) waitState {
	return waitState{widen: p.policy().Widen(w), held: w.Held, stalled: w.Stalled}
}

// rememberedVerdict returns the status of the gang's "does not fit" when
// it still holds for pod, and sets up s as the attempt that made it did
// (for PostFilter). Nil when the gang is to be planned.
func (p *TopologyPlacement) rememberedVerdict(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) *fwk.Status {
	if p.verdicts == nil {
		return nil
	}
	// What plan does first, where it may retire verdicts: a stalled drain
	// ends, a node turns usable again.
	p.endDrainIfDue(ctx, s.gang)
	p.view.Excluded()
	v, ok := p.verdicts.lookup(s.gang, pod, s.req, p.waitStateOf(p.wait(s.gang)), p.clock.Now())
	if !ok {
		p.metrics.verdictLookups.WithLabelValues(verdictMiss).Inc()
		return nil
	}
	p.metrics.verdictLookups.WithLabelValues(verdictHit).Inc()
	// Checked first: the arguments alone cost allocations on every retry.
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Gang still does not fit; nothing changed since it was planned", "plugin", Name, "pod", klog.KObj(pod), "podGroup", s.gang)
	}
	s.waiting = &waitingGang{gang: v.gang, priority: v.priority, nodes: nodes}
	return fwk.NewStatus(v.code, v.reason)
}

// rememberVerdict keeps the verdict of an attempt begun with ticket t that
// found the gang does not fit.
func (p *TopologyPlacement) rememberVerdict(t verdictTicket, pod *v1.Pod, s *cycleState, w placement.Wait, status *fwk.Status) {
	if p.verdicts == nil {
		return
	}
	p.verdicts.remember(s.gang, &verdict{
		ticket: t, made: p.clock.Now(), wait: p.waitStateOf(w),
		pod: pod, req: s.req, priority: s.waiting.priority,
		code: status.Code(), reason: status.Message(), gang: s.waiting.gang,
	})
}

// retireOnQueue wraps a QueueingHint so that an event it retries a pod for
// also retires the verdicts: the hint runs once the scheduler's cache has
// the event, so a verdict made on a snapshot without it is not reused
// (see verdicts).
func (p *TopologyPlacement) retireOnQueue(hint fwk.QueueingHintFn) fwk.QueueingHintFn {
	return func(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
		h, err := hint(logger, pod, oldObj, newObj)
		if h == fwk.Queue {
			p.verdicts.mayFit()
		}
		return h, err
	}
}

// memberChanged reports whether an update of a gang's pod changes what
// its gang is planned from: the pod was bound, finished, is being deleted,
// or its spec (the apiserver moves a pod's generation on every spec
// change), labels or annotations changed.
func memberChanged(old, pod *v1.Pod) bool {
	return old.Spec.NodeName != pod.Spec.NodeName || old.Status.Phase != pod.Status.Phase ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) || old.Generation != pod.Generation ||
		!maps.Equal(old.Labels, pod.Labels) || !maps.Equal(old.Annotations, pod.Annotations)
}

// podGroupChanged reports whether a PodGroup update changes what its gang
// is planned from: its spec (a new generation) or its annotations (the
// topology constraint); status updates do not.
func podGroupChanged(old, pg *schedv1alpha1.PodGroup) bool {
	return old.Generation != pg.Generation || !maps.Equal(old.Annotations, pg.Annotations) ||
		!equality.Semantic.DeepEqual(old.Spec, pg.Spec)
}
