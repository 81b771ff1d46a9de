package topologyplacement

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
)

// Metric names; they sit beside kube-scheduler's own scheduler_* series on
// its /metrics. docs/operations.md describes each.
const (
	metricsNamespace = "lockstep"
	metricsSubsystem = "scheduler"

	// Values of the outcome label of plan_duration_seconds.
	outcomePlanned       = "planned"
	outcomeUnschedulable = "unschedulable"
	outcomeError         = "error"

	// Values of the result label of preemption_attempts_total: a gang
	// evicted victims, no eviction would make room (or the gang fits
	// already), the pod may not preempt (preemptionPolicy Never, or its
	// gang was not waiting for room), or its gang's earlier preemption
	// still waits for its victims to go.
	preemptionPreempted         = "preempted"
	preemptionNoRoom            = "no_room"
	preemptionNotEligible       = "not_eligible"
	preemptionWaitingForVictims = "waiting_for_victims"

	// Values of the kind label of preemption_victims_total.
	victimGang = "gang"
	victimPod  = "pod"

	// Values of the result label of verdict_cache_lookups_total.
	verdictHit  = "hit"
	verdictMiss = "miss"
)

// dropReason says why a plan was dropped before its gang completed. The
// values are the reason label of plans_invalidated_total.
type dropReason string

const (
	dropExpired         dropReason = "expired"
	dropNodeUnavailable dropReason = "node_unavailable"
	dropUnreserved      dropReason = "member_unreserved"
	dropGangDeleted     dropReason = "gang_deleted"
)

// dropReasons are every dropReason, each a series from the start.
var dropReasons = []dropReason{dropExpired, dropNodeUnavailable, dropUnreserved, dropGangDeleted}

// PlanDropReasons are the reason label values of
// lockstep_scheduler_plans_invalidated_total, every one a series from the
// start.
func PlanDropReasons() []string {
	out := make([]string, len(dropReasons))
	for i, r := range dropReasons {
		out[i] = string(r)
	}
	return out
}

// message is what the gang's members waiting at Permit are rejected with.
func (r dropReason) message() string {
	switch r {
	case dropExpired:
		return "plan expired"
	case dropNodeUnavailable:
		return "planned node lost or taken"
	case dropUnreserved:
		return "a member of the gang was unreserved"
	case dropGangDeleted:
		return "its PodGroup was deleted"
	}
	return string(r)
}

// pluginMetrics are the plugin's series. They are fields rather than
// package variables so that every plugin instance, and every test, holds
// its own; registerMetrics makes instances of one process share the
// registered ones.
type pluginMetrics struct {
	planDuration        *metrics.HistogramVec
	gangWait            *metrics.Histogram
	placementEfficiency *metrics.HistogramVec
	plansInvalidated    *metrics.CounterVec
	plansHeld           *metrics.Gauge
	heldGPUs            *metrics.Gauge
	drainedNodes        *metrics.Gauge
	nodesExcluded       *metrics.GaugeVec
	draUnjoinedDevices  *metrics.Gauge
	preemptionAttempts  *metrics.CounterVec
	preemptionVictims   *metrics.CounterVec
	preemptionGPUHours  *metrics.Counter
	// preemptionPDBViolations counts victim pods evicted against a
	// PodDisruptionBudget: only when nothing else made room.
	preemptionPDBViolations *metrics.Counter
	holdsExpired            *metrics.Counter
	evictionErrors          *metrics.Counter
	verdictLookups          *metrics.CounterVec
	bindsInFlight           *metrics.Gauge
	bindBacklogWait         *metrics.Counter
}

func newPluginMetrics() *pluginMetrics {
	return &pluginMetrics{
		planDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "plan_duration_seconds",
			Help:      "Time PreFilter spent planning a gang, by outcome: planned, unschedulable (fits nowhere, bad constraint, no PodGroup) or error.",
			// 100µs to ~1.6s: a 64-member gang on 5,000 nodes plans in a few ms.
			Buckets:        metrics.ExponentialBuckets(0.0001, 2, 15),
			StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		gangWait: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: metricsNamespace,
			Subsystem: metricsSubsystem,
			Name:      "gang_wait_seconds",
			Help:      "Time from a gang's first planning attempt until the whole gang was reserved and its first member reached PreBind, per plan (GPU size class).",
			// 100ms to ~27min, beyond planTTL and Coscheduling's timeouts.
			Buckets:        metrics.ExponentialBuckets(0.1, 2, 15),
			StabilityLevel: metrics.ALPHA,
		}),
		placementEfficiency: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "placement_efficiency",
			Help:           "Modelled efficiency (0..1] of each bound gang's placement against the best one on an empty cluster, by the level of the chosen domain.",
			Buckets:        []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1},
			StabilityLevel: metrics.ALPHA,
		}, []string{"level"}),
		plansInvalidated: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "plans_invalidated_total",
			Help:           "Plans dropped before their gang completed, by reason: expired (planTTL), node_unavailable (a planned node gone, cordoned or taken), member_unreserved (Permit timeout, bind failure) or gang_deleted (its PodGroup deleted).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		plansHeld: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "plans_held",
			Help:           "Incomplete plans holding capacity, sampled every few seconds.",
			StabilityLevel: metrics.ALPHA,
		}),
		heldGPUs: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "held_gpus",
			Help:           "GPUs held for plans' open slots, invisible to the scheduler's own accounting until members are reserved; sampled every few seconds.",
			StabilityLevel: metrics.ALPHA,
		}),
		drainedNodes: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "drained_nodes",
			Help:           "Nodes of domains drained for gangs waiting for their tightest domain: pods of other gangs and GPU pods outside gangs are kept off them; sampled every few seconds.",
			StabilityLevel: metrics.ALPHA,
		}),
		nodesExcluded: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "nodes_excluded",
			Help:           "Nodes left out of gang planning because their NodeTopology is stale (heartbeat older than topologyMaxAge) or invalid (fails validation), by reason; updated at each plan and every few seconds.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		draUnjoinedDevices: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "dra_unjoined_devices",
			Help:           "GPU devices of the DRA driver's ResourceSlices that join no GPU of their node's NodeTopology by UUID, and so are not planned on; set by each plan of a gang that claims GPUs.",
			StabilityLevel: metrics.ALPHA,
		}),
		preemptionAttempts: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_attempts_total",
			Help:           "Gang members that reached PostFilter, by result: preempted (victims evicted), no_room (no eviction would make room), not_eligible (preemptionPolicy Never, or the gang was not waiting for room) or waiting_for_victims (the gang's victims are still going). Pods outside gangs count in scheduler_preemption_attempts_total.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		preemptionVictims: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_victims_total",
			Help:           "Work evicted whole to make room for higher-priority gangs, by kind: gang (every pod of a PodGroup) or pod (a pod outside gangs).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind"}),
		preemptionGPUHours: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_lost_gpu_hours_total",
			Help:           "GPU-hours of work the victims of preemption lost, counted when they were deleted (after any notice): GPUs times the time since their last checkpoint (their start when they never reported one; the notice when a checkpoint answered it), plus their stated restart overhead.",
			StabilityLevel: metrics.ALPHA,
		}),
		preemptionPDBViolations: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_pdb_violations_total",
			Help:           "Victim pods the gang-aware preemption evicted although no PodDisruptionBudget allowed it: only when evicting nothing that breaks a budget would make room. The Preempting event names the budgets.",
			StabilityLevel: metrics.ALPHA,
		}),
		holdsExpired: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_holds_expired_total",
			Help:           "Holds of gang preemption released because victims were still terminating past the hold's bound (their grace period and a drain stall): a victim stuck on a dark node or behind a finalizer.",
			StabilityLevel: metrics.ALPHA,
		}),
		evictionErrors: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "preemption_eviction_errors_total",
			Help:           "Victim pods of gang preemption whose DisruptionTarget condition or deletion failed (other than the pod being gone already).",
			StabilityLevel: metrics.ALPHA,
		}),
		verdictLookups: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "verdict_cache_lookups_total",
			Help:           "PreFilter calls for a gang without a plan, by result: hit (the gang's remembered 'does not fit' still held and was returned without planning) or miss (the gang was planned).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		bindsInFlight: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "binds_in_flight",
			Help:           "Binds the plugin sent that the apiserver has not answered yet, sampled every few seconds; PreFilter of GPU pods waits while they are more than the client sends in a second.",
			StabilityLevel: metrics.ALPHA,
		}),
		bindBacklogWait: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "bind_backlog_wait_seconds_total",
			Help:           "Seconds PreFilter of GPU pods waited for binds in flight to drain: scheduling that ran ahead of what the client can send.",
			StabilityLevel: metrics.ALPHA,
		}),
	}
}

// registerMetrics registers the plugin's metrics through register
// (legacyregistry.Register in production, which kube-scheduler serves on its
// /metrics) and returns the ones to observe.
//
// kube-scheduler builds the plugin once per profile that enables it, while
// a registry takes each series once. Rather than keep a sync.Once and the
// metrics in package variables, as in-tree plugins do, a later instance
// adopts what an earlier one registered: the registry is the only shared
// state, and it answers AlreadyRegisteredError with the existing collector.
func registerMetrics(register func(metrics.Registerable) error) (*pluginMetrics, error) {
	m := newPluginMetrics()
	var errs []error
	add := func(c metrics.Registerable, adopt func(prometheus.Collector) bool) {
		err := register(c)
		var already prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
		case errors.As(err, &already) && adopt(already.ExistingCollector):
		default:
			errs = append(errs, err)
		}
	}
	add(m.planDuration, adoptAs(&m.planDuration))
	add(m.gangWait, adoptAs(&m.gangWait))
	add(m.placementEfficiency, adoptAs(&m.placementEfficiency))
	add(m.plansInvalidated, adoptAs(&m.plansInvalidated))
	add(m.plansHeld, adoptAs(&m.plansHeld))
	add(m.heldGPUs, adoptAs(&m.heldGPUs))
	add(m.drainedNodes, adoptAs(&m.drainedNodes))
	add(m.nodesExcluded, adoptAs(&m.nodesExcluded))
	add(m.draUnjoinedDevices, adoptAs(&m.draUnjoinedDevices))
	add(m.preemptionAttempts, adoptAs(&m.preemptionAttempts))
	add(m.preemptionVictims, adoptAs(&m.preemptionVictims))
	add(m.preemptionGPUHours, adoptAs(&m.preemptionGPUHours))
	add(m.preemptionPDBViolations, adoptAs(&m.preemptionPDBViolations))
	add(m.holdsExpired, adoptAs(&m.holdsExpired))
	add(m.evictionErrors, adoptAs(&m.evictionErrors))
	add(m.verdictLookups, adoptAs(&m.verdictLookups))
	add(m.bindsInFlight, adoptAs(&m.bindsInFlight))
	add(m.bindBacklogWait, adoptAs(&m.bindBacklogWait))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: registering metrics: %w", Name, err)
	}
	// Zeros for every reason, so that rate() and alerts see the series
	// before the first invalidation.
	for _, r := range dropReasons {
		m.plansInvalidated.WithLabelValues(string(r))
	}
	for _, r := range nodeview.ExclusionReasons {
		m.nodesExcluded.WithLabelValues(r)
	}
	for _, r := range []string{preemptionPreempted, preemptionNoRoom, preemptionNotEligible, preemptionWaitingForVictims} {
		m.preemptionAttempts.WithLabelValues(r)
	}
	for _, k := range []string{victimGang, victimPod} {
		m.preemptionVictims.WithLabelValues(k)
	}
	for _, r := range []string{verdictHit, verdictMiss} {
		m.verdictLookups.WithLabelValues(r)
	}
	return m, nil
}

// adoptAs returns a function that points *field at an already registered
// collector of the same type.
func adoptAs[T prometheus.Collector](field *T) func(prometheus.Collector) bool {
	return func(existing prometheus.Collector) bool {
		c, ok := existing.(T)
		if ok {
			*field = c
		}
		return ok
	}
}
