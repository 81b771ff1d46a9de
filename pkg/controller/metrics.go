package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Metrics are the controller's Prometheus metrics. controller-runtime
// already exports reconcile counts and latencies per controller.
type Metrics struct {
	// ReconcileErrors counts reconciles of TrainingJobs that returned an
	// error, terminal ones included.
	ReconcileErrors prometheus.Counter
}

// NewMetrics registers the controller's metrics with reg. Jobs by state are
// counted from reader, the manager's cache, at each scrape, so the gauge
// cannot drift from the jobs it counts.
func NewMetrics(reg prometheus.Registerer, reader client.Reader) (*Metrics, error) {
	m := &Metrics{
		ReconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lockstep", Subsystem: "controller", Name: "reconcile_errors_total",
			Help: "Reconciles of TrainingJobs that returned an error.",
		}),
	}
	for _, c := range []prometheus.Collector{m.ReconcileErrors, &jobStates{reader: reader}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var jobsDesc = prometheus.NewDesc("lockstep_controller_jobs", "TrainingJobs by state.", []string{"state"}, nil)

// jobStates collects the number of jobs in each state.
type jobStates struct {
	reader client.Reader
}

func (c *jobStates) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c *jobStates) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var jobs v1alpha1.TrainingJobList
	if err := c.reader.List(ctx, &jobs); err != nil {
		ch <- prometheus.NewInvalidMetric(jobsDesc, err)
		return
	}
	counts := map[v1alpha1.JobState]int{}
	for _, s := range []v1alpha1.JobState{v1alpha1.JobCreated, v1alpha1.JobRunning, v1alpha1.JobRestarting,
		v1alpha1.JobSucceeded, v1alpha1.JobFailed, v1alpha1.JobSuspended} {
		counts[s] = 0
	}
	for _, j := range jobs.Items {
		state := j.Status.State
		if state == "" {
			state = "Pending"
		}
		counts[state]++
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), string(s))
	}
}
