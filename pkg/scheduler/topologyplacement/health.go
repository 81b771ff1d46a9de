package topologyplacement

import (
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
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

	mu       sync.Mutex
	records  map[string]topologyRecord
	excluded map[string]exclusion // the verdicts last said
	// judged is when the verdicts were last computed; dirty says a record
	// changed since. Within refreshEvery of judged, refresh answers from
	// excluded rather than walk every record again.
	judged time.Time
	dirty  bool
}

// refreshEvery bounds how often the verdicts are recomputed when no
// NodeTopology changed: every gang member's PreFilter asks.
const refreshEvery = time.Second

func newTopologyHealth(maxAge time.Duration, clk clock.Clock, recorder events.EventRecorder, gauge *metrics.GaugeVec, logger klog.Logger) *topologyHealth {
	return &topologyHealth{
		maxAge: maxAge, clock: clk, recorder: recorder, gauge: gauge, logger: logger,
		records: map[string]topologyRecord{}, excluded: map[string]exclusion{},
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
	h.records[nt.Name] = rec
	h.dirty = true
}

// remove forgets a deleted NodeTopology: its node is no longer judged.
func (h *topologyHealth) remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.records, name)
	h.dirty = true
}

// verdict judges one record at now.
func (h *topologyHealth) verdict(rec topologyRecord, now time.Time) (exclusion, bool) {
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

// refresh judges every node now, says each change of verdict once, updates
// the gauge and returns the names of the nodes planning must leave out
// (nil when none are). The map returned is shared: callers only read it.
func (h *topologyHealth) refresh() map[string]exclusion {
	if h == nil {
		return nil
	}
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dirty && !h.judged.IsZero() && now.Sub(h.judged) >= 0 && now.Sub(h.judged) < refreshEvery {
		if len(h.excluded) == 0 {
			return nil
		}
		return h.excluded
	}
	h.judged, h.dirty = now, false
	var out map[string]exclusion
	for name, rec := range h.records {
		ex, bad := h.verdict(rec, now)
		if !bad {
			continue
		}
		if out == nil {
			out = map[string]exclusion{}
		}
		out[name] = ex
	}
	// Say the changes in name order, so events and logs read predictably.
	changed := make([]string, 0)
	for name, ex := range out {
		if prev, ok := h.excluded[name]; !ok || prev.reason != ex.reason {
			changed = append(changed, name)
		}
	}
	for name := range h.excluded {
		if _, still := out[name]; !still {
			changed = append(changed, name)
		}
	}
	sort.Strings(changed)
	rejoined := false
	for _, name := range changed {
		ex, bad := out[name]
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
	h.excluded = out
	if h.excluded == nil {
		h.excluded = map[string]exclusion{}
	}
	counts := map[string]int{excludedStale: 0, excludedInvalid: 0}
	for _, ex := range out {
		counts[ex.reason]++
	}
	for reason, n := range counts {
		h.gauge.WithLabelValues(reason).Set(float64(n))
	}
	return out
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

// handler keeps the records in step with the informer.
func (h *topologyHealth) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				h.set(nt)
			}
		},
		UpdateFunc: func(_, obj any) {
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				h.set(nt)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if nt, ok := obj.(*v1alpha1.NodeTopology); ok {
				h.remove(nt.Name)
			}
		},
	}
}
