package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// elasticJob is an elastic PyTorch job of workers 8-GPU Workers, scaled by
// an HPA on CPU between min and max.
func elasticJob(ns, name string, workers, min, max int32) *utiltesting.TrainingJobWrapper {
	tpl := gpuTemplate("pytorch", 8).Image("registry.example/elastic:latest").Obj()
	return utiltesting.MakeTrainingJob(name, ns).Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaWorker, workers, tpl).
		ElasticPolicy(v1alpha1.ElasticPolicy{
			MinReplicas: ptr.To(min), MaxReplicas: ptr.To(max),
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				},
			}},
		}).
		RunPolicy(v1alpha1.RunPolicy{})
}

// scaleJob sets the job's Worker replicas through its /scale subresource,
// as a HorizontalPodAutoscaler does.
func scaleJob(ctx context.Context, ns, name string, replicas int32) error {
	job := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := cluster.Client.SubResource("scale").Get(ctx, job, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		return cluster.Client.SubResource("scale").Update(ctx, job, client.WithSubResourceBody(scale))
	})
}

// TestElasticJobScales: an elastic job with metrics gets an HPA that reads
// its /scale subresource; a resize through /scale adds Workers beside the
// running ones (the gang is planned again around them, although another
// leaf would fit the new Workers better on its own), removes Workers, and
// is refused outside minReplicas..maxReplicas.
//
// leaf-1 has five empty nodes and every other node is full or cordoned,
// so the job's two Workers land in leaf-1. Then two empty, cordoned nodes
// of leaf-0 are uncordoned: new Workers alone would go there (an exact fit
// for two, the lowest names for one), but they belong beside the first
// two, in leaf-1.
func TestElasticJobScales(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	var full []string
	full = append(full, leaves["leaf-0"][2:]...)
	full = append(full, leaves["leaf-1"][5:]...)
	for _, leaf := range []string{"leaf-2", "leaf-3"} {
		full = append(full, leaves[leaf]...)
	}
	cordoned := leaves["leaf-0"][:2]
	for _, node := range cordoned {
		setUnschedulable(t, node, true)
		t.Cleanup(func() { setUnschedulable(t, node, false) })
	}
	fill(t, ns, "full", 8, full)
	waitRunningAllocated(t, ns, len(full))

	createJob(t, elasticJob(ns, "elastic", 2, 2, 6).Obj())
	leafOf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leafOf[n.Name] = n.Labels[leafLabel]
	}
	inLeaf1 := func(pods map[string]corev1.Pod) {
		t.Helper()
		for _, p := range pods {
			if leafOf[p.Spec.NodeName] != "leaf-1" {
				t.Errorf("Worker %s on %s in %s, want leaf-1 beside the others", p.Name, p.Spec.NodeName, leafOf[p.Spec.NodeName])
			}
		}
	}
	inLeaf1(waitPods(t, ns, "elastic", 2, time.Minute))

	// The controller's HPA targets the job, and the HPA controller can read
	// the job's /scale subresource (no metrics server here, so it never
	// scales by itself).
	err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "HPA able to scale the job", func(ctx context.Context) (bool, error) {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elastic"}, hpa); err != nil {
			return false, nil
		}
		if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "TrainingJob" || ref.Name != "elastic" || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 6 {
			t.Fatalf("HPA spec %+v, want TrainingJob elastic within 2..6", hpa.Spec)
		}
		for _, c := range hpa.Status.Conditions {
			if c.Type == autoscalingv2.AbleToScale && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, node := range cordoned {
		setUnschedulable(t, node, false)
	}
	if err := scaleJob(ctx, ns, "elastic", 4); err != nil {
		t.Fatalf("scaling to 4: %v", err)
	}
	inLeaf1(waitPods(t, ns, "elastic", 4, time.Minute))
	job := waitJob(t, ns, "elastic", time.Minute, "4 Workers recorded with their selector", func(j *v1alpha1.TrainingJob) bool {
		rs := j.Status.ReplicaStatuses[v1alpha1.ReplicaWorker]
		return rs.Active == 4 && rs.Selector != ""
	})
	if job.Status.RestartCount != 0 {
		t.Errorf("restartCount = %d after growing, want 0: an elastic resize is not a restart", job.Status.RestartCount)
	}

	if err := scaleJob(ctx, ns, "elastic", 3); err != nil {
		t.Fatalf("scaling to 3: %v", err)
	}
	waitPods(t, ns, "elastic", 3, time.Minute)
	err = scaleJob(ctx, ns, "elastic", 7)
	if err == nil || !strings.Contains(err.Error(), "maxReplicas") {
		t.Fatalf("scaling to 7 beyond maxReplicas 6: err = %v, want a refusal naming maxReplicas", err)
	}
}

// setUnschedulable cordons or uncordons a node.
func setUnschedulable(t *testing.T, name string, unschedulable bool) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Unschedulable = unschedulable
		_, err = cluster.Clientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting node %s unschedulable=%v: %v", name, unschedulable, err)
	}
}
