package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func TestJobsGaugeCountsTheCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	job := func(name string, f v1alpha1.Framework, state v1alpha1.JobState) client.Object {
		return utiltesting.MakeTrainingJob(name, "ns").Framework(f).WithStatus(v1alpha1.TrainingJobStatus{State: state}).Obj()
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		job("a", v1alpha1.FrameworkPyTorch, v1alpha1.JobRunning),
		job("b", v1alpha1.FrameworkPyTorch, v1alpha1.JobRunning),
		job("c", v1alpha1.FrameworkPyTorch, v1alpha1.JobFailed),
		job("d", v1alpha1.FrameworkMPI, v1alpha1.JobSucceeded),
		job("e", v1alpha1.FrameworkJAX, ""),
	).Build()
	reg := prometheus.NewPedanticRegistry()
	if err := RegisterMetrics(reg, reader); err != nil {
		t.Fatal(err)
	}
	// 6 frameworks x 7 states, zeros included.
	if n, err := testutil.GatherAndCount(reg, "lockstep_controller_jobs"); err != nil || n != 42 {
		t.Errorf("series = %d (%v), want 42", n, err)
	}
	// A preemptions counter for each of the 6 frameworks, zeros included.
	if n, err := testutil.GatherAndCount(reg, "lockstep_controller_preemptions_total"); err != nil || n != 6 {
		t.Errorf("preemption series = %d (%v), want 6", n, err)
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if v := m.GetGauge().GetValue(); v != 0 {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				got[labels["framework"]+"/"+labels["state"]] = v
			}
		}
	}
	want := map[string]float64{"PyTorch/Running": 2, "PyTorch/Failed": 1, "MPI/Succeeded": 1, "JAX/Pending": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("non-zero jobs gauges (-want,+got):\n%s", diff)
	}
}

func TestJobsGaugeReportsAnUnreadableCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache stopped")
		},
	}).Build()
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, reader); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "cache stopped") {
		t.Errorf("Gather error = %v, want the cache's", err)
	}
}

// TestCheckpointAgeGauge: each unfinished job that reported a checkpoint
// has its age at the scrape; finished jobs and jobs that never reported
// have none.
func TestCheckpointAgeGauge(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)
	job := func(name string, state v1alpha1.JobState, ago time.Duration) client.Object {
		st := v1alpha1.TrainingJobStatus{State: state}
		if ago >= 0 {
			st.Checkpoint = &v1alpha1.CheckpointStatus{Step: 1, Time: metav1.NewTime(now.Add(-ago)), Location: "s3://b/1"}
		}
		if state == v1alpha1.JobSucceeded {
			st.Conditions = []metav1.Condition{{Type: string(v1alpha1.JobSucceeded), Status: metav1.ConditionTrue}}
		}
		return utiltesting.MakeTrainingJob(name, "ns").Framework(v1alpha1.FrameworkPyTorch).WithStatus(st).Obj()
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		job("fresh", v1alpha1.JobRunning, time.Minute),
		job("stale", v1alpha1.JobRestarting, 2*time.Hour),
		job("never", v1alpha1.JobRunning, -1),
		job("done", v1alpha1.JobSucceeded, time.Hour),
	).Build()
	c := newJobStates(reader)
	c.now = func() time.Time { return now }
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP lockstep_controller_checkpoint_age_seconds How long ago each unfinished TrainingJob's last reported checkpoint (status.checkpoint.time) was: the work an eviction or a restart would lose now.
# TYPE lockstep_controller_checkpoint_age_seconds gauge
lockstep_controller_checkpoint_age_seconds{job="fresh",namespace="ns"} 60
lockstep_controller_checkpoint_age_seconds{job="stale",namespace="ns"} 7200
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lockstep_controller_checkpoint_age_seconds"); err != nil {
		t.Error(err)
	}
}
