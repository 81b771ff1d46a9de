package topologyplacement

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// waitStateOf is what of w changes a plan (gangmanager.WaitState).
func (p *TopologyPlacement) waitStateOf(w placement.Wait) gangmanager.WaitState {
	return gangmanager.WaitState{Widen: p.policy().Widen(w), Held: w.Held, Stalled: w.Stalled}
}

// rememberedVerdict returns the gang's "does not fit" when
// it still holds for pod, and sets up s as the attempt that made it did
// (for PostFilter). Nil when the gang is to be planned.
func (p *TopologyPlacement) rememberedVerdict(ctx context.Context, pod *v1.Pod, s *cycleState, nodes []fwk.NodeInfo) *rejection {
	// What plan does first, where it may retire verdicts: a stalled drain
	// ends, a node turns usable again.
	p.endDrainIfDue(ctx, s.gang)
	p.view.Excluded()
	v, ok := p.gangs.Verdicts.Lookup(s.gang, pod, s.req, p.waitStateOf(p.wait(s.gang)), p.clock.Now())
	if !ok {
		p.metrics.verdictLookups.WithLabelValues(verdictMiss).Inc()
		return nil
	}
	p.metrics.verdictLookups.WithLabelValues(verdictHit).Inc()
	// Checked first: the arguments alone cost allocations on every retry.
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Gang still does not fit; nothing changed since it was planned", "plugin", Name, "pod", klog.KObj(pod), "podGroup", s.gang)
	}
	s.waiting = &waitingGang{gang: v.Gang, priority: v.Priority, nodes: nodes}
	return &rejection{code: v.Code, reason: v.Reason}
}

// rememberVerdict keeps the verdict of an attempt begun with ticket t that
// found the gang does not fit.
func (p *TopologyPlacement) rememberVerdict(t gangmanager.VerdictTicket, pod *v1.Pod, s *cycleState, w placement.Wait, r *rejection) {
	p.gangs.Verdicts.Remember(s.gang, &gangmanager.Verdict{
		Ticket: t, Made: p.clock.Now(), Wait: p.waitStateOf(w),
		Pod: pod, Request: s.req, Priority: s.waiting.priority,
		Code: r.code, Reason: r.reason, Gang: s.waiting.gang,
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
			p.gangs.Verdicts.MayFit()
		}
		return h, err
	}
}
