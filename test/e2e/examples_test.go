package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/convert"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// exampleFiles are the Kubeflow manifests users already have, as the demo
// submits them (deploy/examples/kubeflow).
func exampleFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot, "deploy", "examples", "kubeflow", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kubeflow manifests in deploy/examples/kubeflow: %v", err)
	}
	return files
}

// TestKubeflowExamplesConvertAndSucceed converts every example manifest
// with kubectl-lockstep's converter, runs it in a namespace of its own and
// drives it to Succeeded: the pods the framework's success rule watches are
// made to exit 0, as KWOK never finishes pods itself.
func TestKubeflowExamplesConvertAndSucceed(t *testing.T) {
	for _, file := range exampleFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := convert.Convert(f)
			if err != nil {
				t.Fatalf("converting %s: %v", file, err)
			}
			for _, w := range res.Warnings {
				t.Logf("warning: %s", w)
			}
			ns := cluster.NewNamespace(t)
			for _, c := range res.Jobs {
				job := c.Job.DeepCopy()
				job.Namespace = ns
				if q := job.Labels[lockstep.LabelKueueQueueName]; q != "" {
					// Written for Kueue: queued there, it runs once admitted.
					startKueue(t)
					kueueQueues(t, ns, q, 64)
				}
				createJob(t, job)
				runExampleToSuccess(t, job)
			}
		})
	}
}

func runExampleToSuccess(t *testing.T, job *v1alpha1.TrainingJob) {
	t.Helper()
	total := 0
	for _, spec := range job.Spec.ReplicaSpecs {
		total += int(ptr.Deref(spec.Replicas, 1))
	}
	pods := waitPods(t, job.Namespace, job.Name, total, 2*time.Minute)
	// Master decides for jobs that have one; elastic jobs succeed when a
	// worker does.
	decider := ""
	for name := range pods {
		if strings.Contains(name, "-master-") {
			decider = name
		}
	}
	if decider == "" {
		decider = job.Name + "-worker-0"
	}
	finishPod(t, job.Namespace, decider, 0)
	done := waitJob(t, job.Namespace, job.Name, time.Minute, "job "+job.Name+" Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	t.Logf("%s: %d pods, Succeeded; placement %+v", job.Name, total, done.Status.Placement)
}

// TestTemplateThatCannotBecomePod: a pod template naming a ServiceAccount
// that does not exist is refused by the API server on every try. The job is
// kept, says why in a Warning event and its Created condition, and the
// retries back off instead of looping hot.
func TestTemplateThatCannotBecomePod(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "no-sa", 1)
	for role, spec := range job.Spec.ReplicaSpecs {
		spec.Template.Spec.ServiceAccountName = "does-not-exist"
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)
	waitJob(t, ns, job.Name, time.Minute, "Created=False FailedCreatePod", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobCreated))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonFailedCreatePod &&
			strings.Contains(c.Message, "does-not-exist")
	})
	// The failure is an error to the workqueue, whose rate limiter spaces
	// the retries (TestFailedPodCreateIsRetriedWithBackoff); here the job
	// must say why and keep its spec.
	if err := waitEvent(ns, "TrainingJob", job.Name, controller.ReasonFailedCreatePod, ""); err != nil {
		t.Error(err)
	}
	if pods, _ := jobPodsOf(context.Background(), ns, job.Name); len(pods) != 0 {
		t.Errorf("%d pods exist, want none", len(pods))
	}
	got := &v1alpha1.TrainingJob{}
	if err := cluster.Client.Get(context.Background(), clientKey(ns, job.Name), got); err != nil {
		t.Errorf("the job is gone: %v", err)
	}
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
