package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
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

// A running DRA gang's status.placement lists each member's devices once
// its claim is allocated, though the allocation reaches the controller
// after every event of the pods: they are bound, run and name their claims
// first, the controller goes idle, and only then are the claims allocated.
// On a cluster the claim is written before its pod is bound, but the claim
// and pod watches are separate streams, and under load the pod's events
// can come first: then nothing but the claim's own event wakes the job,
// and without the claim watch the placement kept listing no devices.
func TestEnvtestPlacementListsDevicesWhenClaimsAllocated(t *testing.T) {
	ns := envtestNamespace(t)
	ctx := context.Background()
	src := claimTemplate(ns, "four", gpuClaimRequest(4))
	src.UID = ""
	if err := harness.api.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	job := createJob(t, pyTorchJob(ns, "late-claims", withClaims("four")))
	names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	pods := waitForPods(t, job, names, nil)
	var want []v1alpha1.PodDevices
	claims := make([]*resourcev1.ResourceClaim, len(pods))
	for i := range pods {
		p := &pods[i]
		node := fmt.Sprintf("%s-gpu-%d", ns, i)
		n := placementNodeObj(node, ns+"-leaf", ns+"-spine", true)
		n.Status = corev1.NodeStatus{}
		if err := harness.api.Create(ctx, n); err != nil {
			t.Fatalf("creating node %s: %v", node, err)
		}
		bindPod(t, p, node)
		// As the resourceclaim controller makes it from the pod's
		// template: owned by the pod, named in its status.
		claim := &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name + "-four", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: src.Spec.Spec,
		}
		if err := harness.api.Create(ctx, claim); err != nil {
			t.Fatalf("creating claim %s: %v", claim.Name, err)
		}
		claims[i] = claim
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur corev1.Pod
			if err := harness.api.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
				return err
			}
			cur.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "four", ResourceClaimName: ptr.To(claim.Name)}}
			return harness.api.Status().Update(ctx, &cur)
		})
		if err != nil {
			t.Fatalf("naming pod %s's claim: %v", p.Name, err)
		}
		d := v1alpha1.PodDevices{Pod: p.Name, Node: node}
		for g := range 4 {
			d.Devices = append(d.Devices, fmt.Sprintf("%s/%s/gpu-%d", lockstep.DRAGPUDriver, node, g))
		}
		want = append(want, d)
	}
	runGang(t, job, pods)
	waitForJob(t, job, "a placement on every node, with no devices yet", func(j *v1alpha1.TrainingJob) bool {
		pl := j.Status.Placement
		return pl != nil && len(pl.Nodes) == len(pods) && len(pl.Devices) == 0
	})

	// Only then: a reconcile the test's earlier writes queued would list
	// them as well.
	waitForIdleController(t)
	for i, claim := range claims {
		node := fmt.Sprintf("%s-gpu-%d", ns, i)
		claim.Status.Allocation = &resourcev1.AllocationResult{}
		for g := range 4 {
			claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
				Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: node, Device: fmt.Sprintf("gpu-%d", g)})
		}
		claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pods[i].Name, UID: pods[i].UID}}
		if err := harness.api.Status().Update(ctx, claim); err != nil {
			t.Fatalf("allocating claim %s: %v", claim.Name, err)
		}
	}
	slices.SortFunc(want, func(a, b v1alpha1.PodDevices) int { return strings.Compare(a.Pod, b.Pod) })
	j := waitForJob(t, job, "every member's devices", func(j *v1alpha1.TrainingJob) bool {
		return j.Status.Placement != nil && len(j.Status.Placement.Devices) == len(pods)
	})
	if diff := cmp.Diff(want, j.Status.Placement.Devices); diff != "" {
		t.Errorf("status.placement.devices (-want,+got):\n%s", diff)
	}
}
