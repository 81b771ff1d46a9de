package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestSimulatedRuntimeEndsJob checks the KWOK stage the benchmark relies on:
// pods annotated with a simulated runtime succeed that long after they
// start, so the job succeeds with nothing patching pod status.
func TestSimulatedRuntimeEndsJob(t *testing.T) {
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "timed", 1)
	for role, spec := range job.Spec.ReplicaSpecs {
		spec.Template.Annotations = map[string]string{framework.SimulatedRuntimeAnnotation: "3s"}
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)

	pods := waitPods(t, ns, job.Name, 2, 30*time.Second)
	var started time.Time
	for _, p := range pods {
		if p.Status.StartTime != nil && p.Status.StartTime.After(started) {
			started = p.Status.StartTime.Time
		}
	}
	done := waitJob(t, ns, job.Name, 40*time.Second, "job Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	finished, err := jobPodsOf(context.Background(), ns, job.Name)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range finished {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s is %s, want Succeeded", name, p.Status.Phase)
		}
		term := p.Status.ContainerStatuses
		if len(term) != 1 || term[0].State.Terminated == nil || term[0].State.Terminated.ExitCode != 0 {
			t.Errorf("pod %s: container statuses %+v, want one terminated with exit code 0", name, term)
			continue
		}
		// Status times have second precision.
		ran := term[0].State.Terminated.FinishedAt.Sub(term[0].State.Terminated.StartedAt.Time)
		if ran < 2*time.Second {
			t.Errorf("pod %s ran %s, want about its simulated 3s", name, ran)
		}
	}
	t.Logf("job %s succeeded %s after its last pod started", done.Name, time.Since(started).Round(time.Second))
}
