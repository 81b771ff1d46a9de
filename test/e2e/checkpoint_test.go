package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// rankClient is a client with the credentials a rank of the job has: a
// token of the pod's ServiceAccount bound to the pod, as the kubelet mounts
// it (and as the pod's name in its authentication.kubernetes.io/pod-name
// claim). It waits for the namespace's ServiceAccount, which
// kube-controller-manager creates.
func rankClient(t *testing.T, pod corev1.Pod) kubernetes.Interface {
	t.Helper()
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	id := localcluster.Identity{Namespace: pod.Namespace, Name: sa}
	var token string
	var last error
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, "a token of "+id.String(), func(ctx context.Context) (bool, error) {
		token, last = cluster.Token(ctx, id, &pod, 600)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, last)
	}
	return newClientset(t, token)
}

// reportCheckpoint is the trainer's one line: a merge patch of its own
// pod's lockstep.dev/checkpoint annotation, as c.
func reportCheckpoint(ctx context.Context, c kubernetes.Interface, ns, pod string, step int64, at time.Time, location string) error {
	return patchPod(ctx, c, ns, pod, map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		lockstep.AnnotationCheckpoint: lockstep.Checkpoint{Step: step, Time: at, Location: location}.Format(),
	}}})
}

func patchPod(ctx context.Context, c kubernetes.Interface, ns, pod string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

// backdateStart sets the pods' status.startTime ago before now: the run
// time the test cannot wait for. Only the time moves; the KWOK stage that
// started the pods does not run again.
func backdateStart(t *testing.T, pods map[string]corev1.Pod, ago time.Duration) {
	t.Helper()
	at := metav1.NewTime(time.Now().Add(-ago).Truncate(time.Second))
	for _, p := range pods {
		data, _ := json.Marshal(map[string]any{"status": map[string]any{"startTime": at}})
		if _, err := cluster.Clientset.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("backdating pod %s: %v", p.Name, err)
		}
	}
}

// waitCheckpoint waits until the job's status.checkpoint is at step.
func waitCheckpoint(t *testing.T, ns, job string, step int64) *v1alpha1.TrainingJob {
	t.Helper()
	return waitJob(t, ns, job, 30*time.Second, "status.checkpoint at step", func(j *v1alpha1.TrainingJob) bool {
		return j.Status.Checkpoint != nil && j.Status.Checkpoint.Step == step
	})
}

// jobTableRow is what kubectl get shows of TrainingJob ns/name: the API
// server's Table of it (the CRD's printer columns), by column name.
func jobTableRow(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	raw, err := cluster.Clientset.Discovery().RESTClient().Get().
		AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", ns, "trainingjobs", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("getting TrainingJob %s/%s as a table: %v", ns, name, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table of TrainingJob %s/%s: %v (%d rows)", ns, name, err, len(table.Rows))
	}
	out := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			out[c.Name] = table.Rows[0].Cells[i]
		}
	}
	return out
}

// onlyPod is the one pod of pods.
func onlyPod(t *testing.T, pods map[string]corev1.Pod) corev1.Pod {
	t.Helper()
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	for _, p := range pods {
		return p
	}
	panic("unreachable")
}

// TestPreemptionCostsLostWork: two low-priority gangs of the same size and
// priority, the rest of the cluster held by work of the preemptor's
// priority. A has run two hours and checkpointed a minute ago, B has run
// twenty minutes and last checkpointed fifteen minutes ago (each rank
// reporting with its own pod's credentials). A high-priority gang that
// needs one of their places evicts A, which loses a minute of work, not B,
// which would lose fifteen: run time alone would have picked B. A's next
// incarnation resumes from its report.
func TestPreemptionCostsLostWork(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	low := priorityClass(t, ns, "low", lowPriority, false)
	high := priorityClass(t, ns, "high", highPriority, false)
	createJob(t, checkpointingJob(ns, "a", 0, 8, low, false))
	aPods := waitPods(t, ns, "a", 1, time.Minute)
	createJob(t, checkpointingJob(ns, "b", 0, 8, low, false))
	bPods := waitPods(t, ns, "b", 1, time.Minute)
	backdateStart(t, aPods, 2*time.Hour)
	backdateStart(t, bPods, 20*time.Minute)
	a, b := onlyPod(t, aPods), onlyPod(t, bPods)
	if err := reportCheckpoint(ctx, rankClient(t, a), ns, a.Name, 7200, time.Now().Add(-time.Minute), "s3://ckpt/a/7200"); err != nil {
		t.Fatalf("rank of a reporting its checkpoint: %v", err)
	}
	if err := reportCheckpoint(ctx, rankClient(t, b), ns, b.Name, 300, time.Now().Add(-15*time.Minute), "s3://ckpt/b/300"); err != nil {
		t.Fatalf("rank of b reporting its checkpoint: %v", err)
	}
	ckpt := waitCheckpoint(t, ns, "a", 7200).Status.Checkpoint
	if ckpt.Location != "s3://ckpt/a/7200" || ckpt.Pod != a.Name || ckpt.Rank == nil || *ckpt.Rank != 0 || ckpt.Source != v1alpha1.CheckpointFromAnnotation {
		t.Errorf("a's status.checkpoint %+v, want s3://ckpt/a/7200 reported by %s (rank 0) in its annotation", ckpt, a.Name)
	}
	waitCheckpoint(t, ns, "b", 300)
	// kubectl get shows it (the CRD's printer columns, served as a Table).
	if row := jobTableRow(t, ns, "a"); row["Checkpoint"] != float64(7200) || row["Restarts"] != nil && row["Restarts"] != float64(0) {
		t.Errorf("kubectl get trainingjob a: %v, want Checkpoint 7200 and no restarts", row)
	}
	fillRest(t, ns, high)

	createJob(t, checkpointingJob(ns, "urgent", 0, 8, high, false))
	waitPreempted(t, ns, podUIDs(aPods), ns+"/urgent", highPriority)
	waitPods(t, ns, "urgent", 1, time.Minute)
	waitJob(t, ns, "a", time.Minute, "a preempted", preempted(ns+"/urgent", highPriority))
	checkUntouched(t, ns, "b", podUIDs(bPods))

	// A's next incarnation waits for room; when it comes it resumes from
	// the report. Its pods carry it as soon as they exist.
	waitResume(t, ns, "a", a.UID, 1, "s3://ckpt/a/7200", 7200)
}

// TestCheckpointReportsAreHeldToTheRanksOwnPod uses a rank's real
// credentials (a token of its ServiceAccount bound to its pod, as the
// kubelet mounts): it may set lockstep.dev/checkpoint on its own pod and
// nothing else. Reporting on another job's pod, which shares its
// ServiceAccount, or on a sibling rank's, changing its own labels, another
// annotation or its spec, writing its job's status or another namespace's
// pods: each is refused with a message naming the field. A malformed
// report gets through admission (it is the controller's to read) and is
// ignored with a Warning event naming the field; the job keeps running and
// its checkpoint is unchanged.
func TestCheckpointReportsAreHeldToTheRanksOwnPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	other := cluster.NewNamespace(t)
	createJob(t, pytorchJob(ns, "x", 1))
	createJob(t, pytorchJob(ns, "y", 0))
	createJob(t, pytorchJob(other, "z", 0))
	xPods := waitPods(t, ns, "x", 2, time.Minute)
	yPod := onlyPod(t, waitPods(t, ns, "y", 1, time.Minute))
	zPod := onlyPod(t, waitPods(t, other, "z", 1, time.Minute))
	var x, sibling corev1.Pod
	for _, p := range xPods {
		if p.Labels[lockstep.LabelReplicaType] == string(v1alpha1.ReplicaMaster) {
			x = p
		} else {
			sibling = p
		}
	}
	rank := rankClient(t, x)
	now := time.Now()
	if err := reportCheckpoint(ctx, rank, ns, x.Name, 10, now, "s3://ckpt/x/10"); err != nil {
		t.Fatalf("rank %s reporting on its own pod: %v", x.Name, err)
	}
	waitCheckpoint(t, ns, "x", 10)

	onlyItself := "may report a checkpoint (metadata.annotations[lockstep.dev/checkpoint]) only on itself"
	wantRefused(t, "reporting for job y", reportCheckpoint(ctx, rank, ns, yPod.Name, 99, now, "s3://ckpt/y/99"), onlyItself)
	wantRefused(t, "reporting on a sibling rank", reportCheckpoint(ctx, rank, ns, sibling.Name, 99, now, "s3://ckpt/x/99"), onlyItself)
	onlyReport := "may change only its metadata.annotations[lockstep.dev/checkpoint]"
	wantRefused(t, "changing its own label", patchPod(ctx, rank, ns, x.Name, map[string]any{"metadata": map[string]any{
		"labels": map[string]string{lockstep.LabelReplicaIndex: "7"}}}), onlyReport)
	wantRefused(t, "changing another annotation", patchPod(ctx, rank, ns, x.Name, map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{lockstep.AnnotationRank: "5"}}}), "metadata.annotations[lockstep.dev/rank]")
	wantRefused(t, "changing its spec", patchPod(ctx, rank, ns, x.Name, map[string]any{"spec": map[string]any{
		"activeDeadlineSeconds": 1}}), onlyReport)
	if _, err := rank.CoreV1().Pods(other).Patch(ctx, zPod.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"lockstep.dev/checkpoint":"{}"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reporting on a pod of another namespace: %v, want Forbidden", err)
	}
	status := []byte(`{"status":{"checkpoint":{"step":1}}}`)
	if err := rank.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath("/apis/lockstep.dev/v1alpha1/namespaces", ns, "trainingjobs", "x", "status").
		Body(status).Do(ctx).Error(); !apierrors.IsForbidden(err) {
		t.Errorf("writing its job's status: %v, want Forbidden", err)
	}

	// A report that does not parse is the controller's to refuse.
	bad := map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		lockstep.AnnotationCheckpoint: `{"step": 11, "time": "now", "location": "s3://ckpt/x/11"}`}}}
	if err := patchPod(ctx, rank, ns, x.Name, bad); err != nil {
		t.Fatalf("rank %s reporting a malformed checkpoint: %v", x.Name, err)
	}
	if err := waitEvent(ns, "TrainingJob", "x", controller.ReasonInvalidCheckpoint, ""); err != nil {
		t.Error(err)
	}
	events, err := cluster.Events(ctx, ns, "TrainingJob", "x")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(e corev1.Event) bool {
		return e.Reason == controller.ReasonInvalidCheckpoint && e.Type == corev1.EventTypeWarning &&
			strings.Contains(e.Message, x.Name) && strings.Contains(e.Message, `time: "now" is not an RFC 3339 time`)
	}) {
		t.Errorf("no Warning %s naming pod %s and the field time: %v", controller.ReasonInvalidCheckpoint, x.Name, eventSummaries(events))
	}
	job := waitJob(t, ns, "x", 10*time.Second, "x running", hasCondition(v1alpha1.JobRunning, ""))
	if c := job.Status.Checkpoint; c == nil || c.Step != 10 {
		t.Errorf("status.checkpoint %+v after a malformed report, want step 10 still", c)
	}
}
