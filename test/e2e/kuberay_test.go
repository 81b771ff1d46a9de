package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// KubeRay interop: the real ray-operator (hack/tools/kuberay pins it) with
// --batch-scheduler=scheduler-plugins creates a PodGroup per RayCluster
// labelled ray.io/gang-scheduling-enabled and names
// scheduler-plugins-scheduler on every pod; lockstep-scheduler serves that
// name as an alias profile and places the gang whole.

// rayGangLabel is the RayCluster label that asks KubeRay for a PodGroup.
const rayGangLabel = "ray.io/gang-scheduling-enabled"

// startKubeRay installs KubeRay's CRDs and identity and runs the operator
// with batchScheduler ("" for none) until the test ends. Call it before
// NewNamespace: cleanups run last first, so the namespace and its Ray
// objects are gone before the operator stops (a RayJob's finalizer needs
// it).
func startKubeRay(t *testing.T, batchScheduler string) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.InstallKubeRay(ctx); err != nil {
		t.Fatal(err)
	}
	comp, err := cluster.KubeRayOperatorComponent(batchScheduler)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.StartComponent(ctx, comp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.StopComponent(framework.KubeRayOperator, 10*time.Second); err != nil {
			t.Errorf("stopping %s: %v", framework.KubeRayOperator, err)
		}
	})
}

// rayPodSpec is a Ray container asking for gpus GPUs, with no grace period
// so the test's namespace goes quickly.
func rayPodSpec(container string, gpus int64) map[string]any {
	resources := map[string]any{"cpu": "1", "memory": "2Gi"}
	limits := map[string]any{}
	if gpus > 0 {
		resources[lockstep.GPUResource] = fmt.Sprint(gpus)
		limits[lockstep.GPUResource] = fmt.Sprint(gpus)
	}
	return map[string]any{
		"spec": map[string]any{
			"terminationGracePeriodSeconds": int64(0),
			"containers": []any{map[string]any{
				"name":      container,
				"image":     "rayproject/ray:2.46.0",
				"resources": map[string]any{"requests": resources, "limits": limits},
			}},
		},
	}
}

// rayClusterSpec is a RayCluster spec of one head and workers workers,
// each asking for gpus GPUs.
func rayClusterSpec(headGPUs int64, workers int64, gpus int64) map[string]any {
	return map[string]any{
		"rayVersion": "2.46.0",
		"headGroupSpec": map[string]any{
			"rayStartParams": map[string]any{},
			"template":       rayPodSpec("ray-head", headGPUs),
		},
		"workerGroupSpecs": []any{map[string]any{
			"groupName":      "gpu",
			"replicas":       workers,
			"minReplicas":    workers,
			"maxReplicas":    workers,
			"rayStartParams": map[string]any{},
			"template":       rayPodSpec("ray-worker", gpus),
		}},
	}
}

// rayCluster is a gang-scheduled RayCluster.
func rayCluster(ns, name string, headGPUs, workers, gpus int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1",
		"kind":       "RayCluster",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{rayGangLabel: "true"},
		},
		"spec": rayClusterSpec(headGPUs, workers, gpus),
	}}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := cluster.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(obj), err)
	}
}

// checkRayGang checks a bound KubeRay gang: every pod asked for the alias
// profile, the PodGroup is KubeRay's (owned by the RayCluster, minMember
// head plus workers) and carries Lockstep's placement, and every GPU pod
// got its GPU indices, all in one leaf. It returns that leaf.
func checkRayGang(t *testing.T, ns, gang string, pods []corev1.Pod, members int32) string {
	t.Helper()
	pg := &schedv1alpha1.PodGroup{}
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: gang}, pg); err != nil {
		t.Fatal(err)
	}
	if len(pg.OwnerReferences) != 1 || pg.OwnerReferences[0].Kind != "RayCluster" {
		t.Errorf("PodGroup %s owners %+v, want its RayCluster (KubeRay made it)", gang, pg.OwnerReferences)
	}
	if pg.Spec.MinMember != members {
		t.Errorf("PodGroup %s minMember %d, want %d (head and workers)", gang, pg.Spec.MinMember, members)
	}
	if pg.Spec.MinResources.Name(lockstep.GPUResource, "").IsZero() {
		t.Errorf("PodGroup %s minResources %v, want KubeRay's sum with GPUs", gang, pg.Spec.MinResources)
	}
	if pg.Annotations[lockstep.AnnotationPlacementDomain] == "" {
		t.Errorf("PodGroup %s has no %s: TopologyPlacement did not plan it whole", gang, lockstep.AnnotationPlacementDomain)
	}
	nodeLeaf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		nodeLeaf[n.Name] = n.Labels[leafLabel]
	}
	leaves := map[string]bool{}
	for _, p := range pods {
		if p.Spec.SchedulerName != lockstep.SchedulerPluginsSchedulerName {
			t.Errorf("pod %s schedulerName %q, want %q (KubeRay's)", p.Name, p.Spec.SchedulerName, lockstep.SchedulerPluginsSchedulerName)
		}
		if gpus := p.Spec.Containers[0].Resources.Limits[lockstep.GPUResource]; gpus.IsZero() {
			// A CPU-only head is outside the GPU plan: the scheduler's
			// other plugins place it, Coscheduling still gates it.
			continue
		}
		if _, err := topology.ParseGPUList(p.Annotations[lockstep.AnnotationGPUs]); err != nil || p.Annotations[lockstep.AnnotationGPUs] == "" {
			t.Errorf("pod %s %s=%q, want its GPUs", p.Name, lockstep.AnnotationGPUs, p.Annotations[lockstep.AnnotationGPUs])
		}
		leaves[nodeLeaf[p.Spec.NodeName]] = true
	}
	if len(leaves) != 1 {
		t.Errorf("gang %s spans leaves %v, want one", gang, leaves)
	}
	for leaf := range leaves {
		return leaf
	}
	return ""
}

// A gang-scheduled RayCluster, one head and three workers of 8 GPUs, is
// placed whole in the one leaf with four empty nodes, although the other
// leaves have more free GPUs in all.
func TestKubeRayClusterPlacedWholeInOneLeaf(t *testing.T) {
	startKubeRay(t, framework.KubeRayBatchScheduler)
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	fill(t, ns, "full", 8, leaves["leaf-0"][:4])
	var partial []string
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		partial = append(partial, leaves[leaf]...)
	}
	fill(t, ns, "partial", 2, partial)
	waitRunningAllocated(t, ns, 4+len(partial))

	create(t, rayCluster(ns, "ray", 8, 3, 8))
	pods := waitGangBound(t, ns, "ray", 4, time.Minute)
	if leaf := checkRayGang(t, ns, "ray", pods, 4); leaf != "leaf-0" {
		t.Errorf("RayCluster placed in %s, want leaf-0 (the only one with four empty nodes)", leaf)
	}
	checkGPUs(t)
}

// rayJob is a RayJob whose RayCluster has one head and workers workers of
// gpus GPUs, with labels. InteractiveMode: KubeRay submits nothing itself
// (no submitter Job, no call to a Ray dashboard, which KWOK pods do not
// serve); it creates the RayCluster and waits for a job id.
func rayJob(ns, name string, labels map[string]any, clusterSpec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1",
		"kind":       "RayJob",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec": map[string]any{
			"submissionMode": "InteractiveMode",
			"rayClusterSpec": clusterSpec,
		},
	}}
}

// withPodGroup has a RayCluster spec's pods join podGroup and ask for
// schedulerName, as a user writes them when the operator makes no PodGroup.
func withPodGroup(spec map[string]any, schedulerName, podGroup string) map[string]any {
	templates := []map[string]any{spec["headGroupSpec"].(map[string]any)["template"].(map[string]any)}
	for _, g := range spec["workerGroupSpecs"].([]any) {
		templates = append(templates, g.(map[string]any)["template"].(map[string]any))
	}
	for _, tpl := range templates {
		tpl["metadata"] = map[string]any{"labels": map[string]any{schedv1alpha1.PodGroupLabel: podGroup}}
		tpl["spec"].(map[string]any)["schedulerName"] = schedulerName
	}
	return spec
}

func rayClusterOf(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	rc := &unstructured.Unstructured{}
	rc.SetAPIVersion("ray.io/v1")
	rc.SetKind("RayCluster")
	return rc, cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rc)
}

// KubeRay v1.5.0's scheduler-plugins integration supports RayCluster only:
// with --batch-scheduler=scheduler-plugins the RayJob controller hands every
// RayJob to it, which refuses anything but a RayCluster, so the RayJob
// stays Initializing and its RayCluster is never made. This test pins that
// finding (docs/interop.md, KubeRay); when a pin bump lifts it, it fails,
// and the RayJob should then be placed like a RayCluster.
func TestKubeRayJobRefusedByBatchScheduler(t *testing.T) {
	startKubeRay(t, framework.KubeRayBatchScheduler)
	ns := cluster.NewNamespace(t)
	const refusal = "currently only RayCluster is supported"
	create(t, rayJob(ns, "job", map[string]any{rayGangLabel: "true"}, rayClusterSpec(8, 3, 8)))
	proc, ok := cluster.Component(framework.KubeRayOperator)
	if !ok {
		t.Fatal("ray-operator is not running")
	}
	// The log outlives operator restarts (one file per component name), so
	// only a line about this test's RayJob counts: its namespace is unique.
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "ray-operator to refuse RayJob "+ns+"/job", func(context.Context) (bool, error) {
		data, err := os.ReadFile(proc.LogPath)
		if err != nil {
			return false, nil
		}
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, refusal) && strings.Contains(line, `"namespace":"`+ns+`"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (log: %s)", err, proc.LogPath)
	}
	job := &unstructured.Unstructured{}
	job.SetAPIVersion("ray.io/v1")
	job.SetKind("RayJob")
	ctx := context.Background()
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job"}, job); err != nil {
		t.Fatal(err)
	}
	status, _, _ := unstructured.NestedString(job.Object, "status", "jobDeploymentStatus")
	name, _, _ := unstructured.NestedString(job.Object, "status", "rayClusterName")
	if status != "Initializing" {
		t.Errorf("RayJob jobDeploymentStatus %q, want Initializing", status)
	}
	if _, err := rayClusterOf(ctx, ns, name); !apierrors.IsNotFound(err) {
		t.Errorf("RayCluster %s of the refused RayJob: %v, want not found", name, err)
	}
}

// The RayJob recipe for KubeRay v1.5.0: the operator without a batch
// scheduler, the RayJob's pod templates naming a PodGroup the user creates
// and lockstep-scheduler. The RayCluster it makes is placed whole in one
// leaf.
func TestKubeRayJobPlacedWholeWithOwnPodGroup(t *testing.T) {
	startKubeRay(t, "")
	ns := cluster.NewNamespace(t)
	create(t, utiltesting.MakePodGroup("job", ns, 4).Obj())
	create(t, rayJob(ns, "job", nil, withPodGroup(rayClusterSpec(8, 3, 8), lockstep.SchedulerName, "job")))
	pods := waitGangBound(t, ns, "job", 4, time.Minute)
	leaves := map[string]bool{}
	for _, n := range cluster.Model.Nodes() {
		for _, p := range pods {
			if p.Spec.NodeName == n.Name {
				leaves[n.Labels[leafLabel]] = true
			}
		}
	}
	if len(leaves) != 1 {
		t.Errorf("RayJob's RayCluster spans leaves %v, want one", leaves)
	}
	for _, p := range pods {
		if p.Annotations[lockstep.AnnotationGPUs] == "" {
			t.Errorf("pod %s has no %s", p.Name, lockstep.AnnotationGPUs)
		}
	}
	checkGPUs(t)
}

// waitGangRejected waits until the gang's members pods exist and the
// scheduler has turned each away, none bound.
func waitGangRejected(t *testing.T, ns, gang string, members int) {
	t.Helper()
	var last string
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "gang "+gang+" turned away", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, gang)
		if err != nil {
			return false, nil
		}
		if len(pods) != members {
			last = fmt.Sprintf("%d pods", len(pods))
			return false, nil
		}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("%s bound to %s while the other gang holds the room", p.Name, p.Spec.NodeName)
			}
			if c := podScheduledCondition(&p); c == nil || c.Status != corev1.ConditionFalse {
				last = fmt.Sprintf("%s not yet turned away: %+v", p.Name, c)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
}

// Two gang-scheduled RayClusters of 40 GPUs when one leaf of 64 is free:
// one is placed whole, the other holds nothing, and it is placed whole once
// the first is deleted.
func TestKubeRayClustersCompete(t *testing.T) {
	startKubeRay(t, framework.KubeRayBatchScheduler)
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	var others []string
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		others = append(others, leaves[leaf]...)
	}
	fill(t, ns, "full", 8, others)
	waitRunningAllocated(t, ns, len(others))

	create(t, rayCluster(ns, "ray-a", 8, 4, 8))
	create(t, rayCluster(ns, "ray-b", 8, 4, 8))
	var winner, loser string
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "one RayCluster bound whole", func(ctx context.Context) (bool, error) {
		a, err := gangBound(ctx, ns, "ray-a")
		if err != nil {
			return false, nil
		}
		b, err := gangBound(ctx, ns, "ray-b")
		if err != nil {
			return false, nil
		}
		switch {
		case a == 5:
			winner, loser = "ray-a", "ray-b"
		case b == 5:
			winner, loser = "ray-b", "ray-a"
		}
		return winner != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := gangPods(context.Background(), ns, winner)
	if err != nil {
		t.Fatal(err)
	}
	if leaf := checkRayGang(t, ns, winner, all, 5); leaf != "leaf-0" {
		t.Errorf("%s placed in %s, want leaf-0 (the only free one)", winner, leaf)
	}
	waitGangRejected(t, ns, loser, 5)
	checkGPUs(t)

	rc, err := rayClusterOf(context.Background(), ns, winner)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Delete(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	pods := waitGangBound(t, ns, loser, 5, 2*time.Minute)
	checkRayGang(t, ns, loser, pods, 5)
	checkGPUs(t)
}

// A lockstep-scheduler gang of three 4-GPU members and a KubeRay gang (a
// CPU-only head and one 4-GPU worker, scheduler-plugins-scheduler) wait for
// the two nodes left, exactly their GPUs, and are retried together when the
// nodes free. Whichever is planned second shares a node with the first one's
// member, whose GPUs are reserved but in no NodeTopology yet: only
// TopologyPlacement's books know them. The profiles share those books, so
// both gangs are placed whole and no GPU index goes to two pods.
func TestKubeRayAndLockstepGangsShareNodes(t *testing.T) {
	startKubeRay(t, framework.KubeRayBatchScheduler)
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	left := leaves["leaf-0"][:2]
	full := leaves["leaf-0"][2:]
	for _, leaf := range []string{"leaf-1", "leaf-2", "leaf-3"} {
		full = append(full, leaves[leaf]...)
	}
	fill(t, ns, "full", 8, full)
	fill(t, ns, "block", 8, left)
	waitRunningAllocated(t, ns, len(full)+len(left))

	create(t, rayCluster(ns, "ray", 0, 1, 4))
	createGang(t, ns, "ddp", 3, 4, nil)
	waitGangRejected(t, ns, "ray", 2)
	waitGangRejected(t, ns, "ddp", 3)
	for i := range left {
		deletePodNow(t, ns, fmt.Sprintf("block-%d", i))
	}
	rayPods := waitGangBound(t, ns, "ray", 2, time.Minute)
	checkRayGang(t, ns, "ray", rayPods, 2)
	ddp := waitGangBound(t, ns, "ddp", 3, time.Minute)
	freed := map[string]bool{}
	for _, n := range left {
		freed[n] = true
	}
	for _, p := range append(rayPods, ddp...) {
		if gpus := p.Spec.Containers[0].Resources.Limits[lockstep.GPUResource]; !gpus.IsZero() && !freed[p.Spec.NodeName] {
			t.Errorf("pod %s on %s, want one of the freed nodes %v", p.Name, p.Spec.NodeName, left)
		}
	}
	checkGPUs(t)
}
