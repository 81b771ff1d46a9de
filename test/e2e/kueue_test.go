package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/controller/kueue"
	"github.com/lockstep-dev/lockstep/pkg/convert"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// Kueue runs for the rest of the suite once a Kueue test starts it: its
// CRDs, RBAC and webhooks stay, and the controller, which watches
// Workloads once their API is served, needs no restart.
var (
	kueueOnce sync.Once
	kueueErr  error
)

func startKueue(t *testing.T) {
	t.Helper()
	kueueOnce.Do(func() {
		begin := time.Now()
		_, kueueErr = cluster.StartKueue(context.Background())
		t.Logf("Kueue started in %s", time.Since(begin).Round(time.Millisecond))
	})
	if kueueErr != nil {
		t.Fatalf("starting Kueue: %v", kueueErr)
	}
}

// kueueObject is a Kueue object of kind with spec.
func kueueObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(kueue.GroupVersion.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// kueueQueues makes a ResourceFlavor and a ClusterQueue of gpus GPUs
// (cluster-scoped, named after ns, removed when the test ends) and the
// LocalQueue lqName in ns pointing at them.
func kueueQueues(t *testing.T, ns, lqName string, gpus int) {
	t.Helper()
	kueueQueuesWith(t, ns, lqName, gpus, nil)
}

// kueueQueuesWith is kueueQueues with the ClusterQueue's preemption policy.
func kueueQueuesWith(t *testing.T, ns, lqName string, gpus int, preemption map[string]any) {
	t.Helper()
	ctx := context.Background()
	// The flavor's node labels reach the admitted pods' node selectors.
	flavor := kueueObject("ResourceFlavor", "", ns+"-gpu", map[string]any{"nodeLabels": map[string]any{lockstep.LabelPool: "h100"}})
	cq := kueueObject("ClusterQueue", "", ns+"-cq", map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{lockstep.GPUResource},
			"flavors": []any{map[string]any{
				"name":      flavor.GetName(),
				"resources": []any{map[string]any{"name": lockstep.GPUResource, "nominalQuota": fmt.Sprint(gpus)}},
			}},
		}},
	})
	if preemption != nil {
		cq.Object["spec"].(map[string]any)["preemption"] = preemption
	}
	lq := kueueObject("LocalQueue", ns, lqName, map[string]any{"clusterQueue": cq.GetName()})
	for _, o := range []*unstructured.Unstructured{flavor, cq, lq} {
		if err := cluster.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []*unstructured.Unstructured{cq, flavor} {
			if err := cluster.Client.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
	// Kueue marks the ClusterQueue Active once it has checked its flavors.
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "ClusterQueue "+cq.GetName()+" active", func(ctx context.Context) (bool, error) {
		got := kueueObject("ClusterQueue", "", cq.GetName(), nil)
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			return false, nil
		}
		return conditionTrue(got, "Active"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// conditionTrue reports whether the unstructured object's status has the
// condition t with status True.
func conditionTrue(u *unstructured.Unstructured, t string) bool {
	return condition(u, t) == "True"
}

// condition returns the status of u's condition t ("" when absent).
func condition(u *unstructured.Unstructured, t string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// gangJob is a PyTorch job of 1 Master and workers Workers of gpus GPUs
// each (GPU limits only: all Kueue's ClusterQueue has to cover).
func gangJob(ns, name string, workers int32, gpus int64) *utiltesting.TrainingJobWrapper {
	return pytorchGang(ns, name, workers, utiltesting.MakePodTemplate("pytorch").NoGracePeriod().GPULimit(gpus).Obj())
}

// jobWorkload returns the Workload the job's controller made for it.
func jobWorkload(ctx context.Context, ns, job string) (*unstructured.Unstructured, error) {
	live, err := jobWorkloads(ctx, ns, job)
	if err != nil {
		return nil, err
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d Workloads of TrainingJob %s/%s", len(live), ns, job)
	}
	return &live[0], nil
}

// waitWorkload polls the job's Workload until done says so.
func waitWorkload(t *testing.T, ns, job, what string, done func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var wl *unstructured.Unstructured
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, what, func(ctx context.Context) (bool, error) {
		var err error
		wl, err = jobWorkload(ctx, ns, job)
		return err == nil && done(wl), nil
	})
	if err != nil {
		t.Fatalf("%v; Workload: %v", err, wl)
	}
	return wl
}

// oneLeaf returns the leaf every pod is on, failing if they span more.
func oneLeaf(t *testing.T, pods map[string]corev1.Pod) string {
	t.Helper()
	leafOf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leafOf[n.Name] = n.Labels[leafLabel]
	}
	leaves := map[string]bool{}
	for _, p := range pods {
		leaves[leafOf[p.Spec.NodeName]] = true
	}
	if len(leaves) != 1 {
		t.Fatalf("pods span leaves %v, want one", leaves)
	}
	for l := range leaves {
		return l
	}
	return ""
}

// heldFor is the condition of a queued job Kueue has not admitted: no
// pods, Suspended=True with reason.
func heldFor(reason string) func(*v1alpha1.TrainingJob) bool {
	return hasCondition(v1alpha1.JobSuspended, reason)
}

// TestKueueQueuesTrainingJobs: a ClusterQueue of 64 GPUs admits two of
// three 4 x 8-GPU jobs; Lockstep places each admitted one whole in a leaf.
// The third stays held (no pods, no PodGroup, Suspended=True
// WaitingForAdmission) until the first finishes, whose Workload the
// controller then marks Finished, freeing the quota for it.
func TestKueueQueuesTrainingJobs(t *testing.T) {
	startKueue(t)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	kueueQueues(t, ns, "lq", 64)

	for _, name := range []string{"first", "second"} {
		createJob(t, gangJob(ns, name, 3, 8).Queue("lq").Obj())
	}
	for _, name := range []string{"first", "second"} {
		wl := waitWorkload(t, ns, name, "Workload of "+name+" admitted", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionAdmitted) })
		if q, _, _ := unstructured.NestedString(wl.Object, "spec", "queueName"); q != "lq" {
			t.Errorf("Workload %s: queueName %q, want lq", wl.GetName(), q)
		}
		// Each is whole in one leaf (both may share one: 2 x 32 GPUs fill
		// a 64-GPU leaf, which best fit prefers).
		pods := waitPods(t, ns, name, 4, time.Minute)
		t.Logf("%s placed in %s", name, oneLeaf(t, pods))
		for _, p := range pods {
			if p.Spec.NodeSelector[lockstep.LabelPool] != "h100" {
				t.Errorf("pod %s: node selector %v, want the admitted flavor's %s=h100", p.Name, p.Spec.NodeSelector, lockstep.LabelPool)
			}
		}
	}

	createJob(t, gangJob(ns, "third", 3, 8).Queue("lq").Obj())
	// Kueue has looked at it and found no quota: QuotaReserved=False.
	waitWorkload(t, ns, "third", "Workload of third pending in Kueue", func(u *unstructured.Unstructured) bool {
		return condition(u, kueue.ConditionQuotaReserved) == "False"
	})
	held := waitJob(t, ns, "third", 30*time.Second, "third held for admission", heldFor(kueue.HeldWaitingForAdmission))
	t.Logf("third held: %s", meta.FindStatusCondition(held.Status.Conditions, string(v1alpha1.JobSuspended)).Message)
	if pods, err := jobPodsOf(ctx, ns, "third"); err != nil || len(pods) != 0 {
		t.Errorf("held job has pods %v (%v), want none", len(pods), err)
	}
	if err := cluster.Client.Get(ctx, clientKey(ns, "third"), &schedv1alpha1.PodGroup{}); !apierrors.IsNotFound(err) {
		t.Errorf("held job's PodGroup: %v, want none", err)
	}

	// The first job's master succeeds: the job succeeds, its Workload is
	// finished, and Kueue admits the third.
	finishPod(t, ns, "first-master-0", 0)
	waitJob(t, ns, "first", 30*time.Second, "first Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	done := waitWorkload(t, ns, "first", "Workload of first Finished", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionFinished) })
	if fs := done.GetFinalizers(); len(fs) != 0 {
		t.Logf("finished Workload still has finalizers %v (removed on a later reconcile)", fs)
	}
	waitWorkload(t, ns, "third", "Workload of third admitted", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionAdmitted) })
	t.Logf("third placed in %s", oneLeaf(t, waitPods(t, ns, "third", 4, time.Minute)))
	resumed := waitJob(t, ns, "third", 30*time.Second, "third no longer suspended", func(j *v1alpha1.TrainingJob) bool {
		return !meta.IsStatusConditionTrue(j.Status.Conditions, string(v1alpha1.JobSuspended))
	})
	if resumed.Status.RestartCount != 0 {
		t.Errorf("third restartCount %d, want 0: waiting for admission is no restart", resumed.Status.RestartCount)
	}
}

// TestKueueConvertedManifestIsQueued: kubectl lockstep convert keeps the
// queue label of a Kubeflow manifest written for Kueue, and the TrainingJob
// is queued: a Workload in that LocalQueue, and no pods until admitted.
func TestKueueConvertedManifestIsQueued(t *testing.T) {
	startKueue(t)
	ns := cluster.NewNamespace(t)
	// The user's manifest as the demo submits it.
	f, err := os.Open(filepath.Join(cluster.RepoRoot, "deploy", "examples", "kubeflow", "restricted-kueue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := convert.Convert(f)
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("converting: %v (%d jobs)", err, len(res.Jobs))
	}
	job := res.Jobs[0].Job.DeepCopy()
	job.Namespace = ns
	if got := job.Labels[lockstep.LabelKueueQueueName]; got != "bookstore-ml-lq" {
		t.Fatalf("converted job's queue label %q, want bookstore-ml-lq", got)
	}
	createJob(t, job)
	wl := waitWorkload(t, ns, job.Name, "Workload of the converted job", func(*unstructured.Unstructured) bool { return true })
	if q, _, _ := unstructured.NestedString(wl.Object, "spec", "queueName"); q != "bookstore-ml-lq" {
		t.Errorf("Workload queueName %q, want bookstore-ml-lq", q)
	}
	waitJob(t, ns, job.Name, 30*time.Second, "converted job held for admission", heldFor(kueue.HeldWaitingForAdmission))
	if pods, err := jobPodsOf(context.Background(), ns, job.Name); err != nil || len(pods) != 0 {
		t.Errorf("queued job has %d pods (%v), want none", len(pods), err)
	}
}

// TestKueueTopologyAnnotations: Kueue TAS's podset-required-topology on a
// TrainingJob's templates becomes the PodGroup's leaf/Required and the gang
// lands in one leaf; a foreign gang's pods with the annotation are placed
// in one leaf by the scheduler alone; a label key no level has is a
// field-named Scheduled=False on the job.
func TestKueueTopologyAnnotations(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)

	createJob(t, gangJob(ns, "tas", 3, 8).TemplateAnnotation(lockstep.AnnotationKueueRequiredTopology, lockstep.LabelFabricTier0).Obj())
	oneLeaf(t, waitPods(t, ns, "tas", 4, time.Minute))
	pg := &schedv1alpha1.PodGroup{}
	if err := cluster.Client.Get(ctx, clientKey(ns, "tas"), pg); err != nil {
		t.Fatal(err)
	}
	if got := [2]string{pg.Annotations[lockstep.AnnotationTopologyLevel], pg.Annotations[lockstep.AnnotationTopologyMode]}; got != [2]string{lockstep.LevelLeaf, string(lockstep.Required)} {
		t.Errorf("PodGroup constraint %v, want leaf/Required", got)
	}

	// Another operator's gang: a PodGroup without Lockstep's annotations,
	// pods carrying Kueue's.
	foreign := utiltesting.MakePodGroup("foreign", ns, 4).Obj()
	if err := cluster.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		pod := utiltesting.MakePod(fmt.Sprintf("foreign-%d", i), ns).GPUs(8).SchedulerName(localcluster.SchedulerName).PodGroup("foreign").Obj()
		pod.Annotations = map[string]string{lockstep.AnnotationKueueRequiredTopology: lockstep.LabelFabricTier0}
		cluster.CreatePods(t, pod)
	}
	bound := waitGangBound(t, ns, "foreign", 4, time.Minute)
	byName := map[string]corev1.Pod{}
	for _, p := range bound {
		byName[p.Name] = p
	}
	oneLeaf(t, byName)

	createJob(t, gangJob(ns, "badkey", 1, 8).TemplateAnnotation(lockstep.AnnotationKueueRequiredTopology, "example.com/rack").Obj())
	bad := waitJob(t, ns, "badkey", 30*time.Second, "badkey Scheduled=False", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonUnknownTopologyLevel
	})
	msg := meta.FindStatusCondition(bad.Status.Conditions, v1alpha1.ConditionScheduled).Message
	for _, want := range []string{"spec.replicaSpecs[", "template.metadata.annotations", lockstep.AnnotationKueueRequiredTopology, `"example.com/rack"`, lockstep.LabelFabricTier0} {
		if !strings.Contains(msg, want) {
			t.Errorf("Scheduled message %q does not name %q", msg, want)
		}
	}
}

// TestKueuePreemptionHoldsAndRequeues: in a 32-GPU ClusterQueue that
// preempts lower priorities, a high-priority 4 x 8-GPU job evicts a running
// low-priority one that asked for notice. The controller gives the low
// job's pods the notice, deletes them whole once its rank reports a
// checkpoint (no restart counted), holds it with reason Evicted, and gives its quota back
// (QuotaReserved=False, Requeued=True), so Kueue admits the high job; when
// that finishes, the low one is admitted again and placed whole.
func TestKueuePreemptionHoldsAndRequeues(t *testing.T) {
	startKueue(t)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	kueueQueuesWith(t, ns, "lq", 32, map[string]any{"withinClusterQueue": "LowerPriority"})
	for name, value := range map[string]int32{"low": 10, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Value: value}
		if err := cluster.Client.Create(ctx, pc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), pc) })
	}
	lowJob := gangJob(ns, "low", 3, 8).PriorityClass(ns + "-low").Queue("lq").Obj()
	lowJob.Spec.RunPolicy.PreemptionNoticeSeconds = ptr.To[int32](600)
	createJob(t, lowJob)
	waitWorkload(t, ns, "low", "Workload of low admitted", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionAdmitted) })
	lowPods := waitPods(t, ns, "low", 4, time.Minute)

	createJob(t, gangJob(ns, "high", 3, 8).PriorityClass(ns+"-high").Queue("lq").Obj())
	// Kueue's eviction gives the same notice as the scheduler's: the pods
	// stay until a rank answers (the notice is ten minutes).
	waitNotice(t, ns, podUIDs(lowPods), lockstep.NoticeBySuspend, false)
	master := lowPods["low-master-0"]
	if err := reportCheckpoint(ctx, rankClient(t, master), ns, master.Name, 900, time.Now(), "s3://ckpt/low/900"); err != nil {
		t.Fatalf("low's rank answering the notice: %v", err)
	}
	held := waitJob(t, ns, "low", time.Minute, "low held after eviction", heldFor(kueue.HeldEvicted))
	t.Logf("low: %s", meta.FindStatusCondition(held.Status.Conditions, string(v1alpha1.JobSuspended)).Message)
	requeued := waitWorkload(t, ns, "low", "Workload of low requeued", func(u *unstructured.Unstructured) bool {
		return condition(u, kueue.ConditionQuotaReserved) == "False" && conditionTrue(u, kueue.ConditionRequeued)
	})
	if _, found, _ := unstructured.NestedMap(requeued.Object, "status", "admission"); found {
		t.Errorf("requeued Workload still has an admission")
	}
	waitWorkload(t, ns, "high", "Workload of high admitted", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionAdmitted) })
	t.Logf("high placed in %s", oneLeaf(t, waitPods(t, ns, "high", 4, time.Minute)))
	if pods, err := jobPodsOf(ctx, ns, "low"); err != nil || len(pods) != 0 {
		t.Errorf("evicted job has %d pods (%v), want none", len(pods), err)
	}

	finishPod(t, ns, "high-master-0", 0)
	waitJob(t, ns, "high", 30*time.Second, "high Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	// high's workers still hold their GPUs until cleanPodPolicy removes
	// them; low is admitted once high's Workload is finished.
	waitWorkload(t, ns, "low", "Workload of low admitted again", func(u *unstructured.Unstructured) bool { return conditionTrue(u, kueue.ConditionAdmitted) })
	again := waitPods(t, ns, "low", 4, time.Minute)
	t.Logf("low placed again in %s", oneLeaf(t, again))
	for _, p := range again {
		if env := envOf(p); env[lockstep.EnvResumeFrom] != "s3://ckpt/low/900" {
			t.Errorf("low's pod %s resumes from %q, want its answer to the notice, s3://ckpt/low/900", p.Name, env[lockstep.EnvResumeFrom])
		}
	}
	low := waitJob(t, ns, "low", 30*time.Second, "low running again", hasCondition(v1alpha1.JobRunning, ""))
	if low.Status.RestartCount != 0 {
		t.Errorf("low restartCount %d after preemption, want 0: an eviction is no failure", low.Status.RestartCount)
	}
}

// TestKueueControllerIdentityWritesOnlyOwnedWorkloads: deploy/'s RBAC lets
// the controller write Workloads, and its admission policy holds it to
// those a TrainingJob controls, as for its pods.
func TestKueueControllerIdentityWritesOnlyOwnedWorkloads(t *testing.T) {
	startKueue(t)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	token, err := cluster.Token(ctx, localcluster.ControllerIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	ctl := newClient(t, token)
	job := gangJob(ns, "owner", 1, 1).Suspend(true).Obj()
	createJob(t, job)

	want, err := kueue.WantedWorkload(job, "lq", nil)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := kueue.ToUnstructured(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Create(ctx, owned); err != nil {
		t.Errorf("controller creating its job's Workload: %v", err)
	}
	foreign := owned.DeepCopy()
	foreign.SetName("foreign")
	foreign.SetResourceVersion("")
	foreign.SetOwnerReferences(nil)
	const notOwned = "may only write objects controlled by a TrainingJob"
	wantRefused(t, "controller creating a Workload no job controls", ctl.Create(ctx, foreign), notOwned)

	if err := cluster.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "controller deleting someone else's Workload", ctl.Delete(ctx, foreign), "may only update or delete objects a TrainingJob already controls")
}

// jobWorkloads lists the Workloads of a job not being deleted, oldest
// first.
func jobWorkloads(ctx context.Context, ns, job string) ([]unstructured.Unstructured, error) {
	list := kueue.NewWorkloadList()
	if err := cluster.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{lockstep.LabelJobName: job}); err != nil {
		return nil, err
	}
	var live []unstructured.Unstructured
	for _, w := range list.Items {
		if w.GetDeletionTimestamp() == nil {
			live = append(live, w)
		}
	}
	slices.SortFunc(live, func(a, b unstructured.Unstructured) int {
		return a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time)
	})
	return live, nil
}

// workerCount is the Worker pod set's count of a Workload.
func workerCount(u *unstructured.Unstructured) int64 {
	sets, _, _ := unstructured.NestedSlice(u.Object, "spec", "podSets")
	for _, s := range sets {
		m, _ := s.(map[string]any)
		if m["name"] == kueue.ElasticPodSet {
			n, _ := m["count"].(int64)
			return n
		}
	}
	return -1
}

// reservedGPUs is the GPU quota a ClusterQueue's status says its admitted
// Workloads reserve.
func reservedGPUs(ctx context.Context, cq string) (int64, error) {
	u := kueueObject("ClusterQueue", "", cq, nil)
	if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		return 0, err
	}
	var total int64
	flavors, _, _ := unstructured.NestedSlice(u.Object, "status", "flavorsReservation")
	for _, f := range flavors {
		res, _, _ := unstructured.NestedSlice(f.(map[string]any), "resources")
		for _, r := range res {
			m := r.(map[string]any)
			if m["name"] == string(lockstep.GPUResource) {
				q, err := resource.ParseQuantity(fmt.Sprint(m["total"]))
				if err != nil {
					return 0, err
				}
				total += q.Value()
			}
		}
	}
	return total, nil
}

// TestKueueElasticJobResizesInPlace: an elastic TrainingJob admitted by
// Kueue (ElasticJobsViaWorkloadSlices on) is resized through its /scale
// subresource without being stopped. In a 32-GPU ClusterQueue, 3 x 8-GPU
// Workers run; scaled to 2, the admitted Workload shrinks in place (same
// object) and the ClusterQueue reserves 16 GPUs; scaled to 4, a replacement
// slice is admitted for the difference, the old slice goes, and 32 GPUs
// are reserved; scaled to 6 (48 GPUs, beyond quota), the replacement slice
// stays pending, the job says so (Resizing=True WaitingForQuota with
// Kueue's reason) and the 4 Workers keep running; scaled back to 4, the
// wait ends; scaled to 6 again and the ClusterQueue grown to 48 GPUs, the
// waiting slice is admitted and all 6 run. Throughout, no Worker that kept
// its index is recreated (UIDs compared), restartCount stays 0, the job is
// never suspended, and the quota reserved is 8 GPUs per Worker the job may
// run.
func TestKueueElasticJobResizesInPlace(t *testing.T) {
	startKueue(t)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	kueueQueues(t, ns, "lq", 32)
	cq := ns + "-cq"

	job := elasticJob(ns, "elastic", 3, 1, 6).Queue("lq").Obj()
	job.Spec.ElasticPolicy.Metrics = nil // resized by hand here, as an HPA would
	rs := job.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
	rs.Template.Spec.Containers[0].Resources.Requests = nil // the ClusterQueue covers GPUs only
	job.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = rs
	createJob(t, job)

	uids := map[string]types.UID{}
	// running waits for n Workers, all Running, and checks that those that
	// were running before are the same pods; Workers scaled away are
	// forgotten (the same name later is a new Worker).
	running := func(n int) {
		t.Helper()
		pods := waitPods(t, ns, "elastic", n, time.Minute)
		for name, uid := range uids {
			p, ok := pods[name]
			switch {
			case !ok:
				delete(uids, name)
			case p.UID != uid:
				t.Errorf("Worker %s was recreated (UID %s, was %s): a resize must not restart it", name, p.UID, uid)
			}
		}
		for name, p := range pods {
			uids[name] = p.UID
		}
	}
	// reserved waits for the ClusterQueue to reserve gpus GPUs.
	reserved := func(gpus int64) {
		t.Helper()
		var got int64
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, fmt.Sprintf("ClusterQueue reserving %d GPUs", gpus), func(ctx context.Context) (bool, error) {
			var err error
			got, err = reservedGPUs(ctx, cq)
			return err == nil && got == gpus, nil
		})
		if err != nil {
			t.Fatalf("%v (reserves %d)", err, got)
		}
	}
	// admittedAt waits for the job to have one Workload, admitted, for
	// workers Workers, and returns it.
	admittedAt := func(workers int64) *unstructured.Unstructured {
		t.Helper()
		var wls []unstructured.Unstructured
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, fmt.Sprintf("one Workload admitted for %d Workers", workers), func(ctx context.Context) (bool, error) {
			var err error
			wls, err = jobWorkloads(ctx, ns, "elastic")
			return err == nil && len(wls) == 1 && conditionTrue(&wls[0], kueue.ConditionAdmitted) && workerCount(&wls[0]) == workers, nil
		})
		if err != nil {
			t.Fatalf("%v; Workloads: %v", err, wls)
		}
		return &wls[0]
	}
	notRestarted := func(what string) *v1alpha1.TrainingJob {
		t.Helper()
		j := &v1alpha1.TrainingJob{}
		if err := cluster.Client.Get(ctx, clientKey(ns, "elastic"), j); err != nil {
			t.Fatal(err)
		}
		if j.Status.RestartCount != 0 || meta.IsStatusConditionTrue(j.Status.Conditions, string(v1alpha1.JobSuspended)) {
			t.Errorf("%s: restartCount %d, conditions %v; want 0 restarts and not suspended", what, j.Status.RestartCount, j.Status.Conditions)
		}
		return j
	}

	first := admittedAt(3)
	if first.GetAnnotations()[lockstep.AnnotationKueueElasticJob] != "true" {
		t.Errorf("Workload %s annotations %v, want %s=true", first.GetName(), first.GetAnnotations(), lockstep.AnnotationKueueElasticJob)
	}
	running(3)
	reserved(24)

	// Down to 2: the same Workload, smaller; Worker 2 goes, 0 and 1 stay.
	begin := time.Now()
	if err := scaleJob(ctx, ns, "elastic", 2); err != nil {
		t.Fatalf("scaling to 2: %v", err)
	}
	reserved(16)
	if w := admittedAt(2); w.GetUID() != first.GetUID() {
		t.Errorf("scale-down replaced Workload %s by %s, want it shrunk in place", first.GetName(), w.GetName())
	}
	running(2)
	t.Logf("scaled down to 2 in %s", time.Since(begin).Round(time.Millisecond))
	notRestarted("after scaling down")

	// Up to 4, within quota: a replacement slice for 32 GPUs, admitted.
	begin = time.Now()
	if err := scaleJob(ctx, ns, "elastic", 4); err != nil {
		t.Fatalf("scaling to 4: %v", err)
	}
	second := admittedAt(4)
	if second.GetUID() == first.GetUID() || second.GetAnnotations()[lockstep.AnnotationKueueSliceReplacementFor] != ns+"/"+first.GetName() {
		t.Errorf("after scaling up: Workload %s annotations %v, want a new slice replacing %s", second.GetName(), second.GetAnnotations(), first.GetName())
	}
	running(4)
	reserved(32)
	t.Logf("scaled up to 4 (slice admitted, 4 Workers running) in %s", time.Since(begin).Round(time.Millisecond))
	notRestarted("after scaling up")

	// Up to 6, beyond quota: the slice for 48 GPUs waits, the job says why,
	// and its 4 Workers run on.
	begin = time.Now()
	if err := scaleJob(ctx, ns, "elastic", 6); err != nil {
		t.Fatalf("scaling to 6: %v", err)
	}
	waiting := waitJob(t, ns, "elastic", time.Minute, "Resizing=True with Kueue's reason", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionResizing)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controller.ReasonWaitingForQuota && strings.Contains(c.Message, "insufficient")
	})
	msg := meta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionResizing).Message
	t.Logf("Resizing after %s: %s", time.Since(begin).Round(time.Millisecond), msg)
	if !strings.Contains(msg, "2 of 6 worker pods") {
		t.Errorf("Resizing message %q, want it to count the 2 of 6 worker pods waiting", msg)
	}
	wls, err := jobWorkloads(ctx, ns, "elastic")
	if err != nil || len(wls) != 2 || wls[0].GetUID() != second.GetUID() || !conditionTrue(&wls[0], kueue.ConditionAdmitted) ||
		workerCount(&wls[1]) != 6 || condition(&wls[1], kueue.ConditionQuotaReserved) != "False" {
		t.Errorf("beyond quota: Workloads %v (%v), want %s admitted for 4 and a pending slice for 6", wls, err, second.GetName())
	}
	running(4)
	reserved(32)
	if pods, _ := jobPodsOf(ctx, ns, "elastic"); len(pods) != 4 {
		t.Errorf("beyond quota: %d Workers exist, want the 4 admitted", len(pods))
	}
	if rs := waiting.Status.ReplicaStatuses[v1alpha1.ReplicaWorker]; rs.Active != 4 {
		t.Errorf("replicaStatuses.Worker.active %d, want 4", rs.Active)
	}
	notRestarted("beyond quota")

	// Back to 4: the pending slice takes the admitted size, Kueue admits it
	// in place of the running one, and the job no longer waits.
	if err := scaleJob(ctx, ns, "elastic", 4); err != nil {
		t.Fatalf("scaling back to 4: %v", err)
	}
	admittedAt(4)
	waitJob(t, ns, "elastic", time.Minute, "Resizing=False", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionResizing)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonResized
	})
	running(4)
	reserved(32)
	notRestarted("after scaling back")

	// Up to 6 again, then the ClusterQueue grows to 48 GPUs: Kueue admits
	// the waiting slice and the 2 Workers that waited join the 4.
	if err := scaleJob(ctx, ns, "elastic", 6); err != nil {
		t.Fatalf("scaling to 6 again: %v", err)
	}
	waitJob(t, ns, "elastic", time.Minute, "Resizing=True again", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionResizing)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controller.ReasonWaitingForQuota
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := kueueObject("ClusterQueue", "", cq, nil)
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "resourceGroups")
		flavors, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "flavors")
		res, _, _ := unstructured.NestedSlice(flavors[0].(map[string]any), "resources")
		res[0].(map[string]any)["nominalQuota"] = "48"
		_ = unstructured.SetNestedSlice(flavors[0].(map[string]any), res, "resources")
		_ = unstructured.SetNestedSlice(groups[0].(map[string]any), flavors, "flavors")
		_ = unstructured.SetNestedSlice(u.Object, groups, "spec", "resourceGroups")
		return cluster.Client.Update(ctx, u)
	})
	if err != nil {
		t.Fatalf("growing ClusterQueue %s to 48 GPUs: %v", cq, err)
	}
	begin = time.Now()
	admittedAt(6)
	running(6)
	reserved(48)
	t.Logf("waiting Workers running %s after the quota grew", time.Since(begin).Round(time.Millisecond))
	waitJob(t, ns, "elastic", time.Minute, "Resizing=False once admitted", func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, v1alpha1.ConditionResizing)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonResized
	})
	notRestarted("at the end")
}
