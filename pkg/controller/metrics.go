package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// RegisterMetrics registers the controller's own metrics with reg,
// controller-runtime's metrics.Registry in production: TrainingJobs by
// framework and state, counted from reader (the manager's cache) at each
// scrape. Counting at scrape time rather than in Reconcile keeps the gauge
// right after a restart and for jobs deleted while the controller was down.
// And lockstep_controller_preemptions_total, the preemptions the controller
// recorded in status.preemptions (preemption.go), counted as it records
// them: a counter of events, not of jobs.
//
// Reconcile counts, errors (terminal ones included) and latencies are
// controller-runtime's own controller_runtime_reconcile_* series with
// controller="trainingjob" (the builder names a controller after its For
// kind); they are not repeated here.
func RegisterMetrics(reg prometheus.Registerer, reader client.Reader) error {
	if err := reg.Register(newJobStates(reader)); err != nil {
		return err
	}
	// A zero for every framework, so that an alert on a series sees 0, not
	// nothing.
	for _, f := range v1alpha1.Frameworks {
		preemptionsTotal.WithLabelValues(string(f))
	}
	return reg.Register(preemptionsTotal)
}

// jobStatePending labels jobs the controller has not yet given a state.
const jobStatePending = "Pending"

// jobStates collects the number of TrainingJobs by framework and state,
// and the age of each unfinished job's last checkpoint, from one list of
// the cache per scrape.
type jobStates struct {
	reader        client.Reader
	desc          *prometheus.Desc
	checkpointAge *prometheus.Desc
	now           func() time.Time
}

func newJobStates(reader client.Reader) *jobStates {
	return &jobStates{
		reader: reader,
		desc: prometheus.NewDesc("lockstep_controller_jobs",
			"TrainingJobs by framework and state (the latest condition; Pending before the first reconcile).",
			[]string{"framework", "state"}, nil),
		checkpointAge: prometheus.NewDesc("lockstep_controller_checkpoint_age_seconds",
			"How long ago each unfinished TrainingJob's last reported checkpoint (status.checkpoint.time) was: the work an eviction or a restart would lose now.",
			[]string{"namespace", "job"}, nil),
		now: time.Now,
	}
}

func (c *jobStates) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.checkpointAge
}

func (c *jobStates) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var jobs v1alpha1.TrainingJobList
	if err := c.reader.List(ctx, &jobs); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for key, n := range countJobStates(jobs.Items) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(key.framework), key.state)
	}
	now := c.now()
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Status.Checkpoint == nil || isFinished(&j.Status) {
			continue
		}
		age := max(now.Sub(j.Status.Checkpoint.Time.Time).Seconds(), 0)
		ch <- prometheus.MustNewConstMetric(c.checkpointAge, prometheus.GaugeValue, age, j.Namespace, j.Name)
	}
}

type frameworkState struct {
	framework v1alpha1.Framework
	state     string
}

// countJobStates counts jobs by framework and state, with a zero for every
// known framework and state so that an alert on a series sees 0, not
// nothing.
func countJobStates(jobs []v1alpha1.TrainingJob) map[frameworkState]int {
	counts := map[frameworkState]int{}
	for _, f := range v1alpha1.Frameworks {
		for _, s := range []v1alpha1.JobState{v1alpha1.JobCreated, v1alpha1.JobRunning, v1alpha1.JobRestarting,
			v1alpha1.JobSucceeded, v1alpha1.JobFailed, v1alpha1.JobSuspended, jobStatePending} {
			counts[frameworkState{f, string(s)}] = 0
		}
	}
	for _, j := range jobs {
		state := string(j.Status.State)
		if state == "" {
			state = jobStatePending
		}
		counts[frameworkState{j.Spec.Framework, state}]++
	}
	return counts
}
