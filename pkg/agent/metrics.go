package agent

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
)

// SourceProfile is the discovery source of fake mode: a node's hardware
// profile label. It counts nodes whose label names no profile.
const SourceProfile discovery.Source = "profile"

// Values of the result label of lockstep_agent_publishes_total.
const (
	publishWritten   = "written"
	publishUnchanged = "unchanged"
	publishError     = "error"
)

// Metrics are the agent's Prometheus metrics. A nil *Metrics records
// nothing, so tests and callers without a registry need none.
type Metrics struct {
	discoveryErrors *prometheus.CounterVec
	publishes       *prometheus.CounterVec
	lastPublish     *prometheus.GaugeVec
}

// NewMetrics registers the agent's metrics with reg, controller-runtime's
// metrics.Registry in production.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lockstep", Subsystem: "agent", Name: "discovery_errors_total",
			Help: "Discovery passes that could not read a source: nvml (discovery failed), sysfs (RDMA devices), pod-resources (the kubelet's allocations) or profile (fake mode: unknown hardware profile).",
		}, []string{"source"}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lockstep", Subsystem: "agent", Name: "publishes_total",
			Help: "NodeTopology publishes by result: written (spec, status or labels changed, or a heartbeat), unchanged (nothing to write) or error.",
		}, []string{"result"}),
		lastPublish: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "lockstep", Subsystem: "agent", Name: "last_publish_timestamp_seconds",
			Help: "When the node's NodeTopology was last published or found current, in Unix seconds.",
		}, []string{"node"}),
	}
	// Zeros for every source and result, so that rate() and alerts see the
	// series before the first failure.
	for _, s := range []discovery.Source{discovery.SourceNVML, discovery.SourceSysfs, discovery.SourcePodResources, SourceProfile} {
		m.discoveryErrors.WithLabelValues(string(s))
	}
	for _, r := range []string{publishWritten, publishUnchanged, publishError} {
		m.publishes.WithLabelValues(r)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.discoveryErrors, m.publishes, m.lastPublish} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) discoveryFailed(sources ...discovery.Source) {
	if m == nil {
		return
	}
	for _, s := range sources {
		m.discoveryErrors.WithLabelValues(string(s)).Inc()
	}
}

// published records a successful publish of node at now; wrote says
// whether anything was written.
func (m *Metrics) published(node string, now time.Time, wrote bool) {
	if m == nil {
		return
	}
	result := publishUnchanged
	if wrote {
		result = publishWritten
	}
	m.publishes.WithLabelValues(result).Inc()
	m.lastPublish.WithLabelValues(node).Set(float64(now.UnixNano()) / 1e9)
}

func (m *Metrics) publishFailed() {
	if m == nil {
		return
	}
	m.publishes.WithLabelValues(publishError).Inc()
}

// forgetNode drops a node that is no longer served, so its last publish
// time does not linger and look stale.
func (m *Metrics) forgetNode(node string) {
	if m == nil {
		return
	}
	m.lastPublish.DeleteLabelValues(node)
}
