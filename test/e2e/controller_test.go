package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	jobframework "github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// gpuTemplate is the template of a pod of one container, named container,
// that asks for a CPU and gpus GPUs and goes at once when deleted.
func gpuTemplate(container string, gpus int64) *utiltesting.PodTemplateWrapper {
	return utiltesting.MakePodTemplate(container).NoGracePeriod().CPU("1").GPULimit(gpus)
}

// pytorchGang starts a PyTorch job of one Master and workers Workers, all
// of template tpl.
func pytorchGang(ns, name string, workers int32, tpl corev1.PodTemplateSpec) *utiltesting.TrainingJobWrapper {
	return utiltesting.MakeTrainingJob(name, ns).Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, workers, tpl).
		RunPolicy(v1alpha1.RunPolicy{})
}

// pytorchJob is a PyTorch job of one Master and workers Workers, each with
// one GPU.
func pytorchJob(ns, name string, workers int32) *v1alpha1.TrainingJob {
	return pytorchGang(ns, name, workers, gpuTemplate("pytorch", 1).Obj()).Obj()
}

func createJob(t *testing.T, job *v1alpha1.TrainingJob) {
	t.Helper()
	if err := cluster.Client.Create(context.Background(), job); err != nil {
		t.Fatalf("creating TrainingJob %s: %v", job.Name, err)
	}
}

// jobPodsOf lists a job's pods that are not being deleted, by name.
func jobPodsOf(ctx context.Context, ns, job string) (map[string]corev1.Pod, error) {
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + job})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p
		}
	}
	return out, nil
}

// waitJob polls the job until done says so.
func waitJob(t *testing.T, ns, name string, timeout time.Duration, what string, done func(*v1alpha1.TrainingJob) bool) *v1alpha1.TrainingJob {
	t.Helper()
	return waitJobIn(t, cluster, ns, name, timeout, what, done)
}

// waitJobIn is waitJob on cluster c, for a test with a cluster of its own.
func waitJobIn(t *testing.T, c *framework.Cluster, ns, name string, timeout time.Duration, what string, done func(*v1alpha1.TrainingJob) bool) *v1alpha1.TrainingJob {
	t.Helper()
	job := &v1alpha1.TrainingJob{}
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, timeout, what, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
			return false, nil
		}
		return done(job), nil
	})
	if err != nil {
		t.Fatalf("%v; job status: %+v", err, job.Status)
	}
	return job
}

func hasCondition(t v1alpha1.JobState, reason string) func(*v1alpha1.TrainingJob) bool {
	return func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, string(t))
		return c != nil && c.Status == metav1.ConditionTrue && (reason == "" || c.Reason == reason)
	}
}

// waitPods waits until the job has n pods, all bound and Running, and
// returns them.
func waitPods(t *testing.T, ns, job string, n int, timeout time.Duration) map[string]corev1.Pod {
	t.Helper()
	var pods map[string]corev1.Pod
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, timeout, fmt.Sprintf("%d pods of %s running", n, job), func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = jobPodsOf(ctx, ns, job); err != nil || len(pods) != n {
			return false, nil
		}
		for _, p := range pods {
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v (have %d)", err, len(pods))
	}
	return pods
}

// finishPod makes a pod's containers exit now with exitCode; KWOK only ends
// pods annotated with a simulated runtime, and only with success.
func finishPod(t *testing.T, ns, name string, exitCode int32) {
	t.Helper()
	ctx := context.Background()
	pod, err := memberPod(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name:  pod.Spec.Containers[0].Name,
		Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: "Completed", StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
		}},
	}}
	if _, err := cluster.Clientset.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finishing pod %s: %v", name, err)
	}
}

// memberPod is the pod named name or, when there is none, the live member
// whose role and index name gives in incarnation 0: after a gang restart
// <job>-worker-1 is incarnation 1's <job>-worker-r1-1 (framework.PodName).
func memberPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return pod, err
	}
	list, lerr := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if lerr != nil {
		return nil, lerr
	}
	for i := range list.Items {
		p := &list.Items[i]
		index, _ := strconv.Atoi(p.Labels[lockstep.LabelReplicaIndex])
		slot := jobframework.PodName(p.Labels[lockstep.LabelJobName], v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType]), int32(index), 0)
		if p.DeletionTimestamp == nil && slot == name {
			return p, nil
		}
	}
	return nil, err
}

func envOf(p corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		out[e.Name] = e.Value
	}
	return out
}

// TestControllerPyTorchJob runs a PyTorch job to success: its pods get
// Kubeflow's environment and are gang-scheduled by lockstep-scheduler, the
// Master's success finishes the job and cleanPodPolicy Running deletes the
// Workers still running.
func TestControllerPyTorchJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "mnist", 3)
	job.Spec.RunPolicy.CleanPodPolicy = ptr.To(v1alpha1.CleanPodPolicyRunning)
	createJob(t, job)

	pods := waitPods(t, ns, job.Name, 4, 30*time.Second)
	for i, name := range []string{"mnist-master-0", "mnist-worker-0", "mnist-worker-1", "mnist-worker-2"} {
		p, ok := pods[name]
		if !ok {
			t.Fatalf("pod %s missing; have %v", name, slices.Sorted(maps.Keys(pods)))
		}
		env := envOf(p)
		want := map[string]string{
			// Kubeflow's bare name, resolved through the job's search domain.
			"MASTER_ADDR": "mnist-master-0",
			"MASTER_PORT": "23456",
			"WORLD_SIZE":  "4",
			"RANK":        fmt.Sprint(i),
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("pod %s: %s=%q, want %q", name, k, env[k], v)
			}
		}
		if p.Spec.SchedulerName != localcluster.SchedulerName || p.Labels[schedv1alpha1.PodGroupLabel] != job.Name {
			t.Errorf("pod %s: scheduler %q, pod group %q", name, p.Spec.SchedulerName, p.Labels[schedv1alpha1.PodGroupLabel])
		}
		if p.Spec.Hostname != name || p.Spec.Subdomain != job.Name {
			t.Errorf("pod %s: hostname %q subdomain %q", name, p.Spec.Hostname, p.Spec.Subdomain)
		}
		if wantSearch := job.Name + "." + ns + ".svc.cluster.local"; p.Spec.DNSConfig == nil || !slices.Contains(p.Spec.DNSConfig.Searches, wantSearch) {
			t.Errorf("pod %s: DNS config %+v lacks the search domain %s that resolves MASTER_ADDR", name, p.Spec.DNSConfig, wantSearch)
		}
		if err := waitEvent(ns, "Pod", name, "Scheduled", localcluster.SchedulerName); err != nil {
			t.Errorf("pod %s was not bound by %s: %v", name, localcluster.SchedulerName, err)
		}
	}
	var pg schedv1alpha1.PodGroup
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, &pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 4 || pg.Spec.MinResources.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 4 {
		t.Errorf("PodGroup spec = %+v, want minMember 4 and 4 GPUs", pg.Spec)
	}
	svc, err := cluster.Clientset.CoreV1().Services(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil || !svc.Spec.PublishNotReadyAddresses || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service %s: %v %+v", job.Name, err, svc)
	}
	running := waitJob(t, ns, job.Name, 20*time.Second, "job Running with placement", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && j.Status.Placement != nil
	})
	// Every pod event reconciles the job; the PodGroup's spec must still have
	// been written once (its generation moves only on spec writes).
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, &pg); err != nil {
		t.Fatal(err)
	}
	if pg.Generation != 1 {
		t.Errorf("PodGroup generation %d after the job ran, want 1: its spec was rewritten without a change", pg.Generation)
	}
	jobEvents, err := cluster.Events(ctx, ns, "TrainingJob", job.Name)
	if err != nil {
		t.Fatal(err)
	}
	if framework.HasEvent(jobEvents, "UpdatedPodGroup", "") {
		t.Errorf("the PodGroup was written again although the job did not change: %v", eventSummaries(jobEvents))
	}
	t.Logf("placement: %+v", *running.Status.Placement)

	finishPod(t, ns, "mnist-master-0", 0)
	waitJob(t, ns, job.Name, 20*time.Second, "job Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	err = localcluster.Poll(ctx, 100*time.Millisecond, 20*time.Second, "workers cleaned up", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, job.Name)
		return err == nil && len(pods) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pods, _ := jobPodsOf(ctx, ns, job.Name); pods["mnist-master-0"].Status.Phase != corev1.PodSucceeded {
		t.Errorf("the succeeded master should be kept (cleanPodPolicy Running); have %v", slices.Sorted(maps.Keys(pods)))
	}
}

// TestControllerGangRestart fails a Worker with a retryable exit code: the
// whole gang is recreated, and its PodGroup runs again, also after a late
// Failed from upstream's PodGroup controller; a second failure exceeds
// backoffLimit 1.
func TestControllerGangRestart(t *testing.T) {
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "restart", 3)
	for role, r := range job.Spec.ReplicaSpecs {
		r.RestartPolicy = v1alpha1.RestartExitCode
		job.Spec.ReplicaSpecs[role] = r
	}
	job.Spec.RunPolicy.BackoffLimit = ptr.To[int32](1)
	createJob(t, job)

	first := waitPods(t, ns, job.Name, 4, 30*time.Second)
	finishPod(t, ns, "restart-worker-1", 137)
	waitJob(t, ns, job.Name, 20*time.Second, "restartCount 1", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount == 1 })
	var second map[string]corev1.Pod
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, "gang recreated", func(ctx context.Context) (bool, error) {
		second = waitPodsNow(ctx, ns, job.Name)
		if len(second) != 4 {
			return false, nil
		}
		for _, p := range second {
			if first[p.Name].UID == p.UID || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, job.Name, 20*time.Second, "job Running again", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
	})
	waitPodGroupRunning := func(what string) {
		t.Helper()
		err := localcluster.Poll(context.Background(), 100*time.Millisecond, 20*time.Second, what, func(ctx context.Context) (bool, error) {
			var pg schedv1alpha1.PodGroup
			err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, &pg)
			return err == nil && pg.Status.Phase == schedv1alpha1.PodGroupRunning, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitPodGroupRunning("PodGroup Running again")

	// Upstream's PodGroup controller may read the group and the failed
	// member before the restart resets the group, and patch Failed over
	// the reset (its patch takes no resourceVersion); it never looks at a
	// Failed group again. Write that late patch now: the controller
	// re-arms the group, and upstream's controller brings it back to
	// Running on the running gang.
	var pg schedv1alpha1.PodGroup
	if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: job.Name}, &pg); err != nil {
		t.Fatal(err)
	}
	late := client.MergeFrom(pg.DeepCopy())
	pg.Status.Phase, pg.Status.Running, pg.Status.Failed = schedv1alpha1.PodGroupFailed, 3, 1
	if err := cluster.Client.Status().Patch(context.Background(), &pg, late); err != nil {
		t.Fatal(err)
	}
	waitPodGroupRunning("PodGroup Running after a late Failed")

	finishPod(t, ns, "restart-worker-2", 137)
	failed := waitJob(t, ns, job.Name, 20*time.Second, "job Failed", hasCondition(v1alpha1.JobFailed, controller.ReasonBackoffLimitExceeded))
	if failed.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", failed.Status.RestartCount)
	}
}

func waitPodsNow(ctx context.Context, ns, job string) map[string]corev1.Pod {
	pods, err := jobPodsOf(ctx, ns, job)
	if err != nil {
		return nil
	}
	return pods
}

// TestControllerActiveDeadline: a job that outlives activeDeadlineSeconds
// fails on time, from the controller's requeue alone.
func TestControllerActiveDeadline(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "deadline", 1)
	job.Spec.RunPolicy.ActiveDeadlineSeconds = ptr.To[int64](5)
	createJob(t, job)
	// The wait bounds "on time": without the controller's own requeue the
	// job would sit until an unrelated event.
	failed := waitJob(t, ns, job.Name, 15*time.Second, "job Failed", hasCondition(v1alpha1.JobFailed, controller.ReasonDeadlineExceeded))
	if ran := failed.Status.CompletionTime.Sub(failed.Status.StartTime.Time); ran < 5*time.Second-time.Second {
		// Timestamps have one-second resolution.
		t.Errorf("job failed %s after it started, before its 5s activeDeadlineSeconds", ran)
	}
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 20*time.Second, "pods stopped", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, job.Name)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestControllerSuspendResume: suspending deletes the pods and keeps the
// job; resuming brings them back.
func TestControllerSuspendResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "suspend", 1)
	createJob(t, job)
	waitPods(t, ns, job.Name, 2, 30*time.Second)

	setSuspend(t, job, true)
	waitJob(t, ns, job.Name, 20*time.Second, "job Suspended", hasCondition(v1alpha1.JobSuspended, ""))
	err := localcluster.Poll(ctx, 100*time.Millisecond, 20*time.Second, "pods gone", func(ctx context.Context) (bool, error) {
		list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	setSuspend(t, job, false)
	waitPods(t, ns, job.Name, 2, 30*time.Second)
	waitJob(t, ns, job.Name, 20*time.Second, "job Running, not Suspended", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobSuspended, "")(j)
	})
}

// TestControllerRestartMidJob kills the controller while it creates a job's
// pods: the restarted one creates no duplicates and carries on.
func TestControllerRestartMidJob(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "crash", 15)
	createJob(t, job)
	_ = localcluster.Poll(ctx, 10*time.Millisecond, 10*time.Second, "first pods", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, job.Name)
		return err == nil && len(pods) > 0, nil
	})
	if err := cluster.KillComponent("controller"); err != nil {
		t.Fatal(err)
	}
	comp, err := cluster.ControllerComponent()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.StartComponent(ctx, comp); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, ns, job.Name, 16, 60*time.Second)
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 16 {
		t.Errorf("%d pods in the namespace, want 16", len(list.Items))
	}
	waitJob(t, ns, job.Name, 20*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	finishPod(t, ns, "crash-master-0", 0)
	done := waitJob(t, ns, job.Name, 20*time.Second, "job Succeeded", hasCondition(v1alpha1.JobSucceeded, ""))
	if done.Status.RestartCount != 0 {
		t.Errorf("restartCount = %d, want 0", done.Status.RestartCount)
	}
	_ = pods
}

// TestControllerLargeJobCreation times the creation of a 256-pod job, one
// GPU each: every GPU of the 32-node HGX cluster.
func TestControllerLargeJobCreation(t *testing.T) {
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "large", 255)
	start := time.Now()
	createJob(t, job)
	err := localcluster.Poll(context.Background(), 50*time.Millisecond, time.Minute, "256 pods created", func(ctx context.Context) (bool, error) {
		pods, err := jobPodsOf(ctx, ns, job.Name)
		return err == nil && len(pods) == 256, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("256 pods created %s after the job", time.Since(start).Round(time.Millisecond))
	waitPods(t, ns, job.Name, 256, 2*time.Minute)
	t.Logf("256 pods bound and running %s after the job", time.Since(start).Round(time.Millisecond))
}

// TestTrainingJobInvalidRejected: the CRD's CEL rules reject an invalid job
// at admission and name the field.
func TestTrainingJobInvalidRejected(t *testing.T) {
	t.Parallel()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "invalid", 1)
	master := job.Spec.ReplicaSpecs[v1alpha1.ReplicaMaster]
	master.Replicas = ptr.To[int32](2)
	job.Spec.ReplicaSpecs[v1alpha1.ReplicaMaster] = master
	err := cluster.Client.Create(context.Background(), job)
	if err == nil {
		t.Fatal("a PyTorch job with 2 Masters was admitted")
	}
	if msg := err.Error(); !strings.Contains(msg, "spec.replicaSpecs") || !strings.Contains(msg, "exactly one replica") {
		t.Errorf("error %q should name spec.replicaSpecs and the rule", msg)
	}

	// A notice out of range (at most an hour: the preemptor's hold
	// covers it).
	job = pytorchJob(ns, "long-notice", 0)
	job.Spec.RunPolicy.PreemptionNoticeSeconds = ptr.To[int32](7200)
	err = cluster.Client.Create(context.Background(), job)
	if err == nil || !strings.Contains(err.Error(), "spec.runPolicy.preemptionNoticeSeconds") || !strings.Contains(err.Error(), "3600") {
		t.Errorf("a job asking for 7200 s of notice: %v; want refused naming spec.runPolicy.preemptionNoticeSeconds and its 3600 s bound", err)
	}
}
