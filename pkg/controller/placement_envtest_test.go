package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// A running gang's placement is rated once the last of its nodes publishes
// its NodeTopology: the creation wakes the job through the manager's
// NodeTopology watch. Nothing else changes meanwhile, the controller is
// idle when it is published, and it retries nothing on a timer, so the
// watch is what rates it.
func TestEnvtestPlacementRatedWhenNodeTopologyPublished(t *testing.T) {
	ns := envtestNamespace(t)
	ctx := context.Background()
	job := createJob(t, pyTorchJob(ns, "rated"))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	pods := waitForPods(t, job, names, nil)
	var nodes []string
	for i := range pods {
		node := fmt.Sprintf("%s-gpu-%d", ns, i)
		nodes = append(nodes, node)
		n := placementNodeObj(node, ns+"-leaf", ns+"-spine", true)
		n.Status = corev1.NodeStatus{}
		if err := harness.api.Create(ctx, n); err != nil {
			t.Fatalf("creating node %s: %v", node, err)
		}
		// The last node's agent has not published yet.
		if i < len(pods)-1 {
			publishNodeTopology(t, node)
		}
		bindPod(t, &pods[i], node)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p corev1.Pod
			if err := harness.api.Get(ctx, client.ObjectKeyFromObject(&pods[i]), &p); err != nil {
				return err
			}
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, lockstep.AnnotationGPUs, "0,1,2,3,4,5,6,7")
			return harness.api.Update(ctx, &p)
		})
		if err != nil {
			t.Fatalf("annotating pod %s: %v", pods[i].Name, err)
		}
	}
	runGang(t, job, pods)
	waitForJob(t, job, "an unrated placement on every node", func(j *v1alpha1.TrainingJob) bool {
		pl := j.Status.Placement
		return pl != nil && len(pl.Nodes) == len(nodes) && pl.Efficiency == ""
	})

	// Only then: a reconcile the test's earlier writes queued would rate
	// it as well.
	waitForIdleController(t)
	publishNodeTopology(t, nodes[len(nodes)-1])
	j := waitForJob(t, job, "a rated placement", func(j *v1alpha1.TrainingJob) bool {
		return j.Status.Placement != nil && j.Status.Placement.Efficiency != ""
	})
	if want := "spine=" + ns + "-spine/leaf=" + ns + "-leaf"; j.Status.Placement.Domain != want {
		t.Errorf("placement domain %q, want %q", j.Status.Placement.Domain, want)
	}
}

// publishNodeTopology creates an hgx-h100 node's NodeTopology, as its agent
// does.
func publishNodeTopology(t *testing.T, node string) {
	t.Helper()
	nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: *hgxSpec(t)}
	if err := harness.api.Create(context.Background(), nt); err != nil {
		t.Fatalf("creating NodeTopology %s: %v", node, err)
	}
}

// waitForIdleController waits until the TrainingJob controller has had
// nothing queued nor in progress (its workqueue and worker metrics) for
// longer than staleJobRetry, the timed requeue a running job may have
// waiting outside the queue's depth: the reconciles the test's earlier
// writes caused are done.
func waitForIdleController(t *testing.T) {
	t.Helper()
	var idleSince time.Time
	eventually(t, "an idle controller", func(context.Context) (bool, string, error) {
		// A collector of the registry that fails leaves the others.
		families, _ := metrics.Registry.Gather()
		var busy float64
		for _, f := range families {
			if f.GetName() != "workqueue_depth" && f.GetName() != "controller_runtime_active_workers" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if (l.GetName() == "name" || l.GetName() == "controller") && l.GetValue() == "trainingjob" {
						busy += m.GetGauge().GetValue()
					}
				}
			}
		}
		if busy > 0 {
			idleSince = time.Time{}
			return false, fmt.Sprintf("%v reconciles queued or running", busy), nil
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		return time.Since(idleSince) > 2*staleJobRetry, "idle", nil
	})
}
