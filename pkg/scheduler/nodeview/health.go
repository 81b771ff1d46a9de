package nodeview

import (
	"container/heap"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Why a node is left out of gang planning; the values are the reason label
// of nodes_excluded.
const (
	excludedStale   = "stale"
	excludedInvalid = "invalid"
)

// Event reasons on the NodeTopology when a node leaves or rejoins planning.
const (
	EventTopologyStale     = "TopologyStale"
	EventTopologyInvalid   = "TopologyInvalid"
	EventTopologyRecovered = "TopologyRecovered"
)

// exclusion says why one node is left out of gang planning.
type exclusion struct {
	reason string // excludedStale or excludedInvalid
	detail string // the age and the limit, or the validation error
}

// topologyRecord is what the health tracker keeps of one NodeTopology.
type topologyRecord struct {
	uid       types.UID
	heartbeat time.Time
	// invalid is the conversion or validation error of the spec, or "".
	invalid string
	// due is when the node's current entry in the expiry heap falls due;
	// zero when it has none.
	due time.Time
}

// topologyHealth decides which nodes gang planning must not use because
// their NodeTopology is stale (no heartbeat for longer than maxAge) or
// malformed (the spec fails conversion or validation). It is fed by the
// NodeTopology informer; staleness depends on the clock, so it is judged
// when asked (once per plan, and every few seconds by the plugin's sweep),
// never per Filter or Score call. Each change of a node's verdict is said
// once, in an event on its NodeTopology, and the nodes_excluded gauge
// follows the current verdicts.
//
// A refresh judges only the nodes whose verdict can have changed: those an
// informer event changed the judgement of (a new, deleted or differently
// valid NodeTopology, a heartbeat of a node left out), and those whose
// heartbeat aged past maxAge, found in a heap of the times usable nodes
// turn stale. A heartbeat of a usable node only moves its time further:
// it costs no judgement, and its heap entry is filed again when it falls
// due. On 25,000 nodes heartbeating every few seconds, judging every node
// on every change cost each gang member's PreFilter half a millisecond.
//
// A NodeTopology without a heartbeat (an agent that predates heartbeats, or
// an object written by hand) is not judged stale: there is nothing to age.
// Nodes without a NodeTopology are not judged at all; they are planned as
// GPUs without topology, as before.
type topologyHealth struct {
	maxAge   time.Duration // 0: staleness is not checked
	clock    clock.Clock
	recorder events.EventRecorder // nil: no events
	gauge    *metrics.GaugeVec
	logger   klog.Logger
	// rejoined, when set, is called after a refresh in which some node
	// became usable again: gangs turned away for want of it may fit now,
	// and a heartbeat-only update is no event the queue acts on.
	rejoined func()
	// specs converts specs (nil: each converts on its own).
	specs *specTable

	mu      sync.Mutex
	records map[string]topologyRecord
	// excluded are the verdicts last said. Refresh returns it to callers
	// that read it without the lock, so a change replaces the map.
	excluded map[string]exclusion
	// pending are the nodes an informer event may have changed the
	// verdict of since the last refresh.
	pending map[string]struct{}
	// expiries holds an entry for each usable node with a heartbeat, due
	// when the node turns stale or earlier (see topologyRecord.due).
	expiries expiryHeap
	// gaugeSet says the gauge was set at least once.
	gaugeSet bool
	// judgements counts the verdicts computed, for tests.
	judgements int
}

func newTopologyHealth(maxAge time.Duration, clk clock.Clock, recorder events.EventRecorder, gauge *metrics.GaugeVec, logger klog.Logger) *topologyHealth {
	return &topologyHealth{
		maxAge: maxAge, clock: clk, recorder: recorder, gauge: gauge, logger: logger,
		records: map[string]topologyRecord{}, excluded: map[string]exclusion{}, pending: map[string]struct{}{},
	}
}

// set records a NodeTopology's heartbeat and whether its spec is valid.
func (h *topologyHealth) set(nt *v1alpha1.NodeTopology) {
	rec := topologyRecord{uid: nt.UID, heartbeat: nt.Status.HeartbeatTime.Time}
	if _, err := h.specs.topology(&nt.Spec); err != nil {
		rec.invalid = err.Error()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.records[nt.Name]
	rec.due = old.due
	h.records[nt.Name] = rec
	_, out := h.excluded[nt.Name]
	if !had || old.uid != rec.uid || old.invalid != rec.invalid || out {
		// A new or changed object, or a heartbeat that may bring a node
		// left out back: judged at the next refresh.
		h.pending[nt.Name] = struct{}{}
		return
	}
	// A heartbeat of a usable node: it turns stale no earlier than its
	// heap entry says, unless the heartbeat went back in time.
	h.watch(nt.Name, rec)
}

// remove forgets a deleted NodeTopology: its node is no longer judged.
func (h *topologyHealth) remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.records, name)
	h.pending[name] = struct{}{}
}

// watch files a heap entry for a usable node, due when it turns stale,
// unless it has one due no later. The caller holds h.mu.
func (h *topologyHealth) watch(name string, rec topologyRecord) {
	if h.maxAge <= 0 || rec.heartbeat.IsZero() {
		return
	}
	staleAt := rec.heartbeat.Add(h.maxAge)
	if !rec.due.IsZero() && !staleAt.Before(rec.due) {
		return
	}
	rec.due = staleAt
	h.records[name] = rec
	heap.Push(&h.expiries, expiry{at: staleAt, name: name})
}

// verdict judges one record at now.
func (h *topologyHealth) verdict(rec topologyRecord, now time.Time) (exclusion, bool) {
	h.judgements++
	if rec.invalid != "" {
		return exclusion{reason: excludedInvalid, detail: rec.invalid}, true
	}
	if h.maxAge > 0 && !rec.heartbeat.IsZero() {
		if age := now.Sub(rec.heartbeat); age > h.maxAge {
			return exclusion{
				reason: excludedStale,
				detail: fmt.Sprintf("last heartbeat %s ago (at %s), more than topologyMaxAge %s",
					age.Truncate(time.Second), rec.heartbeat.UTC().Format(time.RFC3339), h.maxAge),
			}, true
		}
	}
	return exclusion{}, false
}

// refresh judges the nodes whose verdict can have changed by now, says
// each change of verdict once, updates the gauge and returns the names of
// the nodes planning must leave out (nil when none are). The map returned
// is shared: callers only read it.
func (h *topologyHealth) refresh() map[string]exclusion {
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	// The nodes whose heartbeat aged past maxAge, or whose entry was filed
	// before a later heartbeat: judged again below, and filed anew while
	// usable. An entry whose node is gone or was filed again is dropped.
	for len(h.expiries) > 0 && now.After(h.expiries[0].at) {
		e := heap.Pop(&h.expiries).(expiry)
		if rec, ok := h.records[e.name]; ok && rec.due.Equal(e.at) {
			rec.due = time.Time{}
			h.records[e.name] = rec
			h.pending[e.name] = struct{}{}
		}
	}
	if len(h.pending) > 0 || !h.gaugeSet {
		h.judgePending(now)
	}
	if len(h.excluded) == 0 {
		return nil
	}
	return h.excluded
}

// judgePending judges the pending nodes at now and says what changed. The
// caller holds h.mu.
func (h *topologyHealth) judgePending(now time.Time) {
	verdicts := make(map[string]exclusion, len(h.pending))
	// Say the changes in name order, so events and logs read predictably.
	changed := make([]string, 0)
	for name := range h.pending {
		rec, exists := h.records[name]
		var ex exclusion
		bad := false
		if exists {
			if ex, bad = h.verdict(rec, now); !bad {
				h.watch(name, rec)
			}
		}
		prev, was := h.excluded[name]
		if bad != was || (bad && prev.reason != ex.reason) {
			changed = append(changed, name)
			verdicts[name] = ex
		}
	}
	clear(h.pending)
	sort.Strings(changed)
	if len(changed) > 0 || !h.gaugeSet {
		excluded := make(map[string]exclusion, len(h.excluded)+len(changed))
		for name, ex := range h.excluded {
			excluded[name] = ex
		}
		rejoined := false
		for _, name := range changed {
			ex := verdicts[name]
			bad := ex.reason != ""
			if bad {
				excluded[name] = ex
			} else {
				delete(excluded, name)
			}
			rec, exists := h.records[name]
			if !bad && !exists {
				continue // deleted while left out: nothing rejoins
			}
			h.say(name, rec.uid, ex, bad)
			rejoined = rejoined || !bad
		}
		if rejoined && h.rejoined != nil {
			h.rejoined()
		}
		h.excluded = excluded
		h.setGauge()
	}
}

// setGauge sets nodes_excluded from the current verdicts. The caller holds
// h.mu.
func (h *topologyHealth) setGauge() {
	counts := map[string]int{excludedStale: 0, excludedInvalid: 0}
	for _, ex := range h.excluded {
		counts[ex.reason]++
	}
	for reason, n := range counts {
		h.gauge.WithLabelValues(reason).Set(float64(n))
	}
	h.gaugeSet = true
}

// expiry is when a node's heartbeat turns stale.
type expiry struct {
	at   time.Time
	name string
}

// expiryHeap is a min-heap of expiries (container/heap), earliest first.
type expiryHeap []expiry

func (e expiryHeap) Len() int           { return len(e) }
func (e expiryHeap) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e expiryHeap) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiryHeap) Push(x any)        { *e = append(*e, x.(expiry)) }
func (e *expiryHeap) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// say records a node leaving (bad) or rejoining planning in an event on its
// NodeTopology and in the log.
func (h *topologyHealth) say(name string, uid types.UID, ex exclusion, bad bool) {
	reason, eventType, note := EventTopologyRecovered, v1.EventTypeNormal, "Node "+name+" is used for gang planning again: its NodeTopology is fresh and valid"
	switch {
	case bad && ex.reason == excludedStale:
		reason, eventType, note = EventTopologyStale, v1.EventTypeWarning, "Node "+name+" left out of gang planning: "+ex.detail
	case bad:
		reason, eventType, note = EventTopologyInvalid, v1.EventTypeWarning, "Node "+name+" left out of gang planning: NodeTopology fails validation: "+ex.detail
	}
	h.logger.Info("Node topology health changed", "node", name, "reason", reason, "detail", note)
	if h.recorder == nil {
		return
	}
	ref := &v1.ObjectReference{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       "NodeTopology",
		Name:       name,
		UID:        uid,
	}
	h.recorder.Eventf(ref, nil, eventType, reason, "Scheduling", "%s", note)
}

// ExclusionReasons are the reasons a node is left out of planning, the
// values of the nodes_excluded gauge's reason label.
var ExclusionReasons = []string{excludedStale, excludedInvalid}
