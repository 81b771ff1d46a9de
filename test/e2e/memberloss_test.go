package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// watchClient is a client of the test cluster that can watch.
func watchClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme, err := localcluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runningShortWatch records every status of a job the apiserver served that
// said Running=True while fewer pods than the gang were active: a job must
// never report Running short a rank.
type runningShortWatch struct {
	mu    sync.Mutex
	short []string
	stop  func()
}

func watchRunningShort(t *testing.T, ns, name string, ranks int32) *runningShortWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list := &v1alpha1.TrainingJobList{}
	w, err := watchClient(t).Watch(ctx, list, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatalf("watching TrainingJobs: %v", err)
	}
	rw := &runningShortWatch{stop: func() { cancel(); w.Stop() }}
	go func() {
		for ev := range w.ResultChan() {
			job, ok := ev.Object.(*v1alpha1.TrainingJob)
			if !ok || ev.Type == watch.Deleted || job.Name != name {
				continue
			}
			if !meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobRunning)) {
				continue
			}
			var active int32
			for _, rs := range job.Status.ReplicaStatuses {
				active += rs.Active
			}
			if active < ranks {
				rw.mu.Lock()
				rw.short = append(rw.short, fmt.Sprintf("resourceVersion %s: Running with %d of %d ranks active", job.ResourceVersion, active, ranks))
				rw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(rw.stop)
	return rw
}

func (rw *runningShortWatch) check(t *testing.T) {
	t.Helper()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, s := range rw.short {
		t.Errorf("the job reported Running short a rank: %s", s)
	}
}

// waitGangReplaced waits until the job has ranks pods, none of them with a
// UID of before, all Running and labelled with incarnation.
func waitGangReplaced(t *testing.T, ns, job string, ranks int, before map[string]corev1.Pod, incarnation string) map[string]corev1.Pod {
	t.Helper()
	var now map[string]corev1.Pod
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 60*time.Second, "the whole gang recreated and running", func(ctx context.Context) (bool, error) {
		now = waitPodsNow(ctx, ns, job)
		if len(now) != ranks {
			return false, nil
		}
		for _, p := range now {
			if before[p.Name].UID == p.UID || p.Status.Phase != corev1.PodRunning || p.Labels[lockstep.LabelIncarnation] != incarnation {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v (pods now: %v)", err, podSummary(now))
	}
	return now
}

func podSummary(pods map[string]corev1.Pod) map[string]string {
	out := map[string]string{}
	for name, p := range pods {
		out[name] = fmt.Sprintf("%s uid=%s incarnation=%s", p.Status.Phase, p.UID, p.Labels[lockstep.LabelIncarnation])
	}
	return out
}

// TestGangRestartsWhenAMemberIsLost deletes one rank of a running gang, as
// an eviction, a preemption or `kubectl delete pod` would: the whole gang is
// restarted once (every surviving pod replaced, restartCount exactly 1), is
// placed again whole, and the job never says Running while short a rank.
func TestGangRestartsWhenAMemberIsLost(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "loss", 3)
	createJob(t, job)
	first := waitPods(t, ns, job.Name, 4, 60*time.Second)
	waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	short := watchRunningShort(t, ns, job.Name, 4)

	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, "loss-worker-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, job.Name, 30*time.Second, "restartCount 1", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	second := waitGangReplaced(t, ns, job.Name, 4, first, "1")
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running again", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
	})
	if final.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d after one lost member, want exactly 1", final.Status.RestartCount)
	}
	c := meta.FindStatusCondition(final.Status.Conditions, string(v1alpha1.JobRestarting))
	if c == nil || c.Reason != "GangRunning" {
		t.Errorf("Restarting condition %+v, want False with reason GangRunning after the restart", c)
	}
	if err := waitEvent(ns, "TrainingJob", job.Name, "Restarting", ""); err != nil {
		t.Error(err)
	}
	for _, p := range second {
		if p.Spec.NodeName == "" {
			t.Errorf("pod %s of the restarted gang is not bound", p.Name)
		}
	}
	short.check(t)
}

// TestGangRestartSurvivesControllerCrash kills the controller right after it
// recorded a restart, before or while it deleted the old gang: the restarted
// controller finishes the restart without counting it again.
func TestGangRestartSurvivesControllerCrash(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "crashloss", 7)
	createJob(t, job)
	first := waitPods(t, ns, job.Name, 8, 60*time.Second)
	waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))

	// Kill the controller as soon as the restart is recorded: the watch
	// sees the status write before most of the 7 deletes have gone out.
	ctxW, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	w, err := watchClient(t).Watch(ctxW, &v1alpha1.TrainingJobList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, "crashloss-worker-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if j, ok := ev.Object.(*v1alpha1.TrainingJob); ok && j.Status.RestartCount >= 1 {
			break
		}
	}
	if err := cluster.KillComponent("controller"); err != nil {
		t.Fatal(err)
	}
	survivors := 0
	if pods, err := jobPodsOf(ctx, ns, job.Name); err == nil {
		for _, p := range pods {
			if first[p.Name].UID == p.UID {
				survivors++
			}
		}
	}
	t.Logf("controller killed with %d pods of the old gang not yet deleted", survivors)
	comp, err := cluster.ControllerComponent()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.StartComponent(ctx, comp); err != nil {
		t.Fatal(err)
	}
	waitGangReplaced(t, ns, job.Name, 8, first, "1")
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running again", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
	})
	if final.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d after one lost member and a controller crash, want exactly 1", final.Status.RestartCount)
	}
	// No pod of the job exists twice: names are unique, so count UIDs.
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[types.UID]bool{}
	for _, p := range list.Items {
		uids[p.UID] = true
	}
	if len(list.Items) != 8 || len(uids) != 8 {
		t.Errorf("%d pods (%d UIDs) of the job, want 8", len(list.Items), len(uids))
	}
}

// TestGangRestartsWhenANodeIsLost deletes the node one rank of a running
// gang runs on, as a node that died and was removed would be: the
// apiserver's pod garbage collector deletes the orphaned pod, the
// controller restarts the whole gang once, an infrastructure restart, and
// the gang is placed again whole on the nodes that remain.
func TestGangRestartsWhenANodeIsLost(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := pytorchJob(ns, "nodeloss", 3)
	for role, spec := range job.Spec.ReplicaSpecs {
		spec.Template.Spec.Containers[0].Resources.Limits[lockstep.GPUResource] = resource.MustParse("8")
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)
	first := waitPods(t, ns, job.Name, 4, 60*time.Second)
	waitJob(t, ns, job.Name, 30*time.Second, "job Running", hasCondition(v1alpha1.JobRunning, ""))
	lost := first["nodeloss-worker-1"].Spec.NodeName
	var model *corev1.Node
	for _, n := range cluster.Model.Nodes() {
		if n.Name == lost {
			model = n
		}
	}
	if model == nil {
		t.Fatalf("node %s is not in the cluster model", lost)
	}
	t.Cleanup(func() {
		if err := cluster.CreateNodes(ctx, []*corev1.Node{model}); err != nil {
			t.Errorf("bringing node %s back: %v", lost, err)
			return
		}
		if err := cluster.WaitNodesReady(ctx, 2*time.Minute); err != nil {
			t.Error(err)
		}
		err := localcluster.Poll(ctx, 250*time.Millisecond, time.Minute, "NodeTopology of "+lost, func(ctx context.Context) (bool, error) {
			return cluster.Client.Get(ctx, client.ObjectKey{Name: lost}, &v1alpha1.NodeTopology{}) == nil, nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	if err := cluster.DeleteNodes(ctx, []*corev1.Node{model}); err != nil {
		t.Fatal(err)
	}
	// The pod garbage collector removes pods of a deleted node after its
	// quarantine (40 s in Kubernetes 1.34).
	waitJob(t, ns, job.Name, 3*time.Minute, "restartCount 1", func(j *v1alpha1.TrainingJob) bool { return j.Status.RestartCount >= 1 })
	second := waitGangReplaced(t, ns, job.Name, 4, first, "1")
	final := waitJob(t, ns, job.Name, 30*time.Second, "job Running again", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && !hasCondition(v1alpha1.JobRestarting, "")(j)
	})
	if final.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d after one lost node, want exactly 1", final.Status.RestartCount)
	}
	// The garbage collector marks the pod DisruptionTarget (DeletionByPodGC)
	// before it deletes it: the cluster's doing, not counted against
	// backoffLimit.
	if r := final.Status.Restarts; final.Status.InfrastructureRestarts != 1 || len(r) != 1 || r[0].Kind != v1alpha1.RestartInfrastructure {
		t.Errorf("infrastructureRestarts %d, restarts %+v; want one Infrastructure restart", final.Status.InfrastructureRestarts, r)
	}
	for _, p := range second {
		if p.Spec.NodeName == lost {
			t.Errorf("pod %s was placed on the deleted node %s", p.Name, lost)
		}
	}
}
