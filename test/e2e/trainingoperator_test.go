package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// The Kubeflow training-operator v1 (hack/tools/training-operator) run as a
// peer with --gang-scheduler-name=lockstep-scheduler: its jobs' pods and
// PodGroups go to Lockstep unchanged (docs/interop.md).

// trainingOperator starts the operator once for the package: the first test
// that needs it pays for its CRDs and start, later ones (and -count reruns)
// reuse it. The suite's teardown stops it with the other components.
var trainingOperator struct {
	once sync.Once
	err  error
}

func requireTrainingOperator(t *testing.T) {
	t.Helper()
	trainingOperator.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, trainingOperator.err = cluster.StartTrainingOperator(ctx)
	})
	if trainingOperator.err != nil {
		t.Fatalf("starting the training-operator (make tools builds bin/training-operator): %v", trainingOperator.err)
	}
}

var (
	pytorchJobGVK = schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}
	mpiJobGVK     = schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "MPIJob"}
)

// replicaSpec is one replica type of a Kubeflow job: replicas pods of one
// container asking for gpus GPUs.
func replicaSpec(replicas int, container string, gpus int64) map[string]any {
	c := map[string]any{"name": container, "image": "registry.example/train:latest"}
	if gpus > 0 {
		c["resources"] = map[string]any{"limits": map[string]any{string(lockstep.GPUResource): gpus}}
	}
	return map[string]any{
		"replicas":      int64(replicas),
		"restartPolicy": "OnFailure",
		"template":      map[string]any{"spec": map[string]any{"containers": []any{c}}},
	}
}

// newPyTorchJob is a PyTorchJob of one Master and workers Workers, each
// asking for 8 GPUs; "pytorch" is the container name the operator requires.
func newPyTorchJob(ns, name string, workers int) *unstructured.Unstructured {
	job := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"pytorchReplicaSpecs": map[string]any{
				"Master": replicaSpec(1, "pytorch", 8),
				"Worker": replicaSpec(workers, "pytorch", 8),
			},
		},
	}}
	job.SetGroupVersionKind(pytorchJobGVK)
	return job
}

// newMPIJob is an MPIJob of a CPU-only Launcher and workers 8-GPU Workers.
func newMPIJob(ns, name string, workers int) *unstructured.Unstructured {
	job := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"mpiReplicaSpecs": map[string]any{
				"Launcher": replicaSpec(1, "mpi", 0),
				"Worker":   replicaSpec(workers, "mpi", 8),
			},
		},
	}}
	job.SetGroupVersionKind(mpiJobGVK)
	return job
}

func createKubeflowJob(t *testing.T, job *unstructured.Unstructured) {
	t.Helper()
	if err := cluster.Client.Create(context.Background(), job); err != nil {
		t.Fatalf("creating %s %s/%s: %v", job.GetKind(), job.GetNamespace(), job.GetName(), err)
	}
}

// waitOperatorPodGroup waits for the PodGroup the operator makes for a job
// (named after it) and returns it.
func waitOperatorPodGroup(t *testing.T, ns, job string) *schedv1alpha1.PodGroup {
	t.Helper()
	pg := &schedv1alpha1.PodGroup{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "PodGroup of "+job, func(ctx context.Context) (bool, error) {
		return cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job}, pg) == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// waitJobCondition waits until the job reports condition (Running,
// Succeeded, …) True: the operator has seen its pods in that state.
func waitJobCondition(t *testing.T, gvk schema.GroupVersionKind, ns, name, condition string) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, fmt.Sprintf("%s %s %s", gvk.Kind, name, condition), func(ctx context.Context) (bool, error) {
		job := &unstructured.Unstructured{}
		job.SetGroupVersionKind(gvk)
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == condition && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// leafOfNode maps the model's nodes to their leaf.
func leafOfNode() map[string]string {
	out := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		out[n.Name] = n.Labels[leafLabel]
	}
	return out
}

// gpuPodLeaves returns the leaves the pods asking for GPUs are bound to, and
// fails the test if any pod is unbound or lacks the scheduler name.
func gpuPodLeaves(t *testing.T, pods []corev1.Pod) []string {
	t.Helper()
	leaves := leafOfNode()
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Spec.SchedulerName != localcluster.SchedulerName {
			t.Errorf("pod %s has schedulerName %q, want %q (the operator's --gang-scheduler-name)", p.Name, p.Spec.SchedulerName, localcluster.SchedulerName)
		}
		if p.Spec.NodeName == "" {
			t.Errorf("pod %s is not bound", p.Name)
			continue
		}
		if gpuRequest(p) > 0 {
			seen[leaves[p.Spec.NodeName]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func gpuRequest(p corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		q := c.Resources.Limits[lockstep.GPUResource]
		n += q.Value()
	}
	return n
}

// checkOperatorPodGroup compares what the operator wrote on the PodGroup
// with what the gang needs: every replica a member, and their GPUs.
func checkOperatorPodGroup(t *testing.T, pg *schedv1alpha1.PodGroup, members int32, gpus int64) {
	t.Helper()
	type spec struct {
		MinMember int32
		GPUs      string
	}
	got := spec{MinMember: pg.Spec.MinMember}
	if q, ok := pg.Spec.MinResources[lockstep.GPUResource]; ok {
		got.GPUs = q.String()
	}
	want := spec{MinMember: members, GPUs: resource.NewQuantity(gpus, resource.DecimalSI).String()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodGroup %s from the operator (-want,+got):\n%s", pg.Name, diff)
	}
}

// TestTrainingOperatorPyTorchJobInOneLeaf: a PyTorchJob of a Master and
// three Workers, 8 GPUs each, created through the real operator, is
// gang-scheduled by Lockstep from the operator's own PodGroup and lands
// whole inside one leaf, and the operator reports it Running.
func TestTrainingOperatorPyTorchJobInOneLeaf(t *testing.T) {
	requireTrainingOperator(t)
	ns := cluster.NewNamespace(t)
	createKubeflowJob(t, newPyTorchJob(ns, "pt", 3))

	checkOperatorPodGroup(t, waitOperatorPodGroup(t, ns, "pt"), 4, 32)
	pods := waitGangBound(t, ns, "pt", 4, 2*time.Minute)
	if leaves := gpuPodLeaves(t, pods); len(leaves) != 1 {
		t.Errorf("PyTorchJob pods span leaves %v, want one", leaves)
	}
	pg := waitPlacementRecorded(t, ns, "pt")
	if got := pg.Annotations[lockstep.AnnotationPlacementLevel]; got != "leaf" {
		t.Errorf("PodGroup placement level %q, want leaf", got)
	}
	waitJobCondition(t, pytorchJobGVK, ns, "pt", "Running")
}

// TestTrainingOperatorMPIJobInOneLeaf: an MPIJob (kubeflow.org/v1) of a
// CPU-only Launcher and four 8-GPU Workers: the PodGroup counts all five,
// all are bound together, the Workers inside one leaf.
func TestTrainingOperatorMPIJobInOneLeaf(t *testing.T) {
	requireTrainingOperator(t)
	ns := cluster.NewNamespace(t)
	createKubeflowJob(t, newMPIJob(ns, "mpi", 4))

	checkOperatorPodGroup(t, waitOperatorPodGroup(t, ns, "mpi"), 5, 32)
	pods := waitGangBound(t, ns, "mpi", 5, 2*time.Minute)
	if leaves := gpuPodLeaves(t, pods); len(leaves) != 1 {
		t.Errorf("MPIJob workers span leaves %v, want one", leaves)
	}
	waitPlacementRecorded(t, ns, "mpi")
	waitJobCondition(t, mpiJobGVK, ns, "mpi", "Running")
}

// waitPlacementRecorded waits for the placement annotations Lockstep's
// PreBind writes on the gang's PodGroup and returns the PodGroup.
func waitPlacementRecorded(t *testing.T, ns, name string) *schedv1alpha1.PodGroup {
	t.Helper()
	pg := &schedv1alpha1.PodGroup{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "placement recorded on PodGroup "+name, func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pg); err != nil {
			return false, nil
		}
		return pg.Annotations[lockstep.AnnotationPlacementDomain] != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// TestTrainingOperatorCompetingJobsNeverDeadlock: two PyTorchJobs of 20
// 8-GPU pods each (160 GPUs) on 256 GPUs: only one fits. One is bound whole
// while the other has no pod bound, never both in part; when the first job
// is deleted the second is bound whole.
func TestTrainingOperatorCompetingJobsNeverDeadlock(t *testing.T) {
	requireTrainingOperator(t)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	const members = 20
	createKubeflowJob(t, newPyTorchJob(ns, "a", members-1))
	createKubeflowJob(t, newPyTorchJob(ns, "b", members-1))

	var first, second string
	err := localcluster.Poll(ctx, 200*time.Millisecond, 3*time.Minute, "one job bound whole", func(ctx context.Context) (bool, error) {
		pa, errA := gangPods(ctx, ns, "a")
		pb, errB := gangPods(ctx, ns, "b")
		if errA != nil || errB != nil {
			return false, nil
		}
		na, nb := len(framework.BoundPods(pa)), len(framework.BoundPods(pb))
		if na > 0 && nb > 0 {
			return false, fmt.Errorf("both jobs partly bound (%d and %d of %d): deadlock risk", na, nb, members)
		}
		switch {
		case na == members:
			first, second = "a", "b"
		case nb == members:
			first, second = "b", "a"
		}
		return first != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The other job's pods all exist (the operator made them) and none is
	// bound while the first holds the room.
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "job "+second+"'s pods created", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, second)
		if err != nil {
			return false, nil
		}
		if n := len(framework.BoundPods(pods)); n != 0 {
			return false, fmt.Errorf("job %s has %d pods bound while %s holds the cluster", second, n, first)
		}
		return len(pods) == members, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	job := newPyTorchJob(ns, first, members-1)
	if err := cluster.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatalf("deleting PyTorchJob %s: %v", first, err)
	}
	err = localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "job "+first+"'s pods gone", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, first)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitGangBound(t, ns, second, members, 2*time.Minute)
	waitJobCondition(t, pytorchJobGVK, ns, second, "Running")
	t.Logf("%s ran whole, then %s", first, second)
}

// TestTrainingOperatorDeletedPodRejoinsGang: a bound PyTorchJob loses a
// worker; the operator recreates it (the pod is missing, whatever its
// restart policy) and Lockstep places and binds the new pod with GPUs of
// its own beside its siblings: in their leaf, which has room (the deleted
// pod's node at least), although a lone member would best fit elsewhere.
// So the gang is whole again, as tight as before, and the job Running.
func TestTrainingOperatorDeletedPodRejoinsGang(t *testing.T) {
	requireTrainingOperator(t)
	ns := cluster.NewNamespace(t)
	ctx := context.Background()
	createKubeflowJob(t, newPyTorchJob(ns, "pt", 3))
	pods := waitGangBound(t, ns, "pt", 4, 2*time.Minute)
	leaves := gpuPodLeaves(t, pods)
	if len(leaves) != 1 {
		t.Fatalf("PyTorchJob pods span leaves %v, want one", leaves)
	}
	waitJobCondition(t, pytorchJobGVK, ns, "pt", "Running")

	const victim = "pt-worker-1"
	var old types.UID
	for _, p := range pods {
		if p.Name == victim {
			old = p.UID
		}
	}
	if old == "" {
		t.Fatalf("no pod %s among the job's pods", victim)
	}
	deletePodNow(t, ns, victim)

	var bound []corev1.Pod
	err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "recreated "+victim+" bound", func(ctx context.Context) (bool, error) {
		all, err := gangPods(ctx, ns, "pt")
		if err != nil {
			return false, nil
		}
		bound = framework.BoundPods(all)
		for _, p := range bound {
			if p.Name == victim && p.UID != old {
				return len(bound) == 4, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v: %d of 4 bound", err, len(bound))
	}
	for _, p := range bound {
		if p.Name == victim && p.Annotations[lockstep.AnnotationGPUs] == "" {
			t.Errorf("recreated %s bound without %s: Lockstep did not place it", victim, lockstep.AnnotationGPUs)
		}
	}
	if after := gpuPodLeaves(t, bound); !cmp.Equal(leaves, after) {
		t.Errorf("gang on leaves %v before the member was replaced, %v after: the new member belongs beside its siblings", leaves, after)
	}
	waitActiveReplicas(t, pytorchJobGVK, ns, "pt", map[string]int64{"Master": 1, "Worker": 3})
}

// waitActiveReplicas waits until the job's status counts want active
// (running) pods per replica type: the operator saw the gang whole.
func waitActiveReplicas(t *testing.T, gvk schema.GroupVersionKind, ns, name string, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, fmt.Sprintf("%s %s active replicas", gvk.Kind, name), func(ctx context.Context) (bool, error) {
		job := &unstructured.Unstructured{}
		job.SetGroupVersionKind(gvk)
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
			return false, nil
		}
		got = map[string]int64{}
		for rt := range want {
			got[rt], _, _ = unstructured.NestedInt64(job.Object, "status", "replicaStatuses", rt, "active")
		}
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Fatalf("%v: active replicas (-want,+got):\n%s", err, cmp.Diff(want, got))
	}
}
