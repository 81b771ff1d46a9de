package controller

// Tests of the TrainingJob controller against a real apiserver (envtest; see
// envtest_setup_test.go). There is no kubelet, scheduler or garbage
// collector: the tests move pods through their phases through the status
// subresource as a kubelet would, and check the owner references the
// garbage collector would follow. Every test has a namespace of its own and
// waits on the objects in the apiserver, never on time.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// envtestTemplate is a pod template asking for gpus GPUs (as limits, the
// device plugin's way) and a little CPU and memory.
func envtestTemplate(gpus int64) corev1.PodTemplateSpec {
	p := utiltesting.MakePod("", "")
	if gpus > 0 {
		p.GPUs(gpus)
		delete(p.Spec.Containers[0].Resources.Requests, lockstep.GPUResource)
	}
	return corev1.PodTemplateSpec{Spec: p.Obj().Spec}
}

// pyTorchJob is a PyTorch job of one Master and three Workers with 8 GPUs
// each, as deploy/examples/pytorch-ddp-leaf.yaml.
func pyTorchJob(ns, name string, mutate ...func(*v1alpha1.TrainingJob)) *v1alpha1.TrainingJob {
	return utiltesting.MakeTrainingJob(name, ns).Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, envtestTemplate(8)).
		Role(v1alpha1.ReplicaWorker, 3, envtestTemplate(8)).
		With(mutate...).Obj()
}

// mpiJob is an MPI job: a Launcher without GPUs and two 8-GPU Workers.
func mpiJob(ns, name string) *v1alpha1.TrainingJob {
	return utiltesting.MakeTrainingJob(name, ns).Framework(v1alpha1.FrameworkMPI).
		Role(v1alpha1.ReplicaLauncher, 1, envtestTemplate(0)).
		Role(v1alpha1.ReplicaWorker, 2, envtestTemplate(8)).Obj()
}

func runPolicy(j *v1alpha1.TrainingJob) *v1alpha1.RunPolicy {
	if j.Spec.RunPolicy == nil {
		j.Spec.RunPolicy = &v1alpha1.RunPolicy{}
	}
	return j.Spec.RunPolicy
}

func withBackoffLimit(n int32) func(*v1alpha1.TrainingJob) {
	return func(j *v1alpha1.TrainingJob) { runPolicy(j).BackoffLimit = ptr.To(n) }
}

func withRestartPolicy(role v1alpha1.ReplicaType, p v1alpha1.RestartPolicy) func(*v1alpha1.TrainingJob) {
	return func(j *v1alpha1.TrainingJob) {
		s := j.Spec.ReplicaSpecs[role]
		s.RestartPolicy = p
		j.Spec.ReplicaSpecs[role] = s
	}
}

func createJob(t *testing.T, job *v1alpha1.TrainingJob) *v1alpha1.TrainingJob {
	t.Helper()
	if err := harness.api.Create(context.Background(), job); err != nil {
		t.Fatalf("creating TrainingJob %s/%s: %v", job.Namespace, job.Name, err)
	}
	return job
}

func getJob(ctx context.Context, job *v1alpha1.TrainingJob) (*v1alpha1.TrainingJob, error) {
	var j v1alpha1.TrainingJob
	err := harness.api.Get(ctx, client.ObjectKeyFromObject(job), &j)
	return &j, err
}

// jobPods lists the job's pods that are not being deleted, by name.
func jobPods(ctx context.Context, job *v1alpha1.TrainingJob) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := harness.api.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{lockstep.LabelJobName: job.Name}); err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods, nil
}

// livePod is the pod of namespace ns named name or, when there is none,
// the live one whose slot name (slotName) is name: after a gang restart
// <job>-worker-1 is the incarnation's <job>-worker-r1-1.
func livePod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var list corev1.PodList
	if err := harness.api.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && slotName(p) == name {
			return p, nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

// podNames lists the pods' names; nil for none.
func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// slotName is the name of the pod's role and index in incarnation 0,
// <job>-<role>-<index>: what the pod is, whatever incarnation it was named
// for (framework.PodName).
func slotName(p *corev1.Pod) string {
	i, _ := strconv.Atoi(p.Labels[lockstep.LabelReplicaIndex])
	return framework.PodName(p.Labels[lockstep.LabelJobName], v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType]), int32(i), 0)
}

// slotNames lists the pods' slot names, sorted; nil for none.
func slotNames(pods []corev1.Pod) []string {
	var names []string
	for i := range pods {
		names = append(names, slotName(&pods[i]))
	}
	slices.Sort(names)
	return names
}

// podUIDs maps the pods' slot names to their UIDs.
func podUIDs(pods []corev1.Pod) map[string]types.UID {
	uids := map[string]types.UID{}
	for i := range pods {
		uids[slotName(&pods[i])] = pods[i].UID
	}
	return uids
}

// gangNames is the slot names of a job's pods: <job>-<role>-<index>, their
// names in incarnation 0 (waitForPods).
func gangNames(job string, roles map[v1alpha1.ReplicaType]int32) []string {
	var names []string
	for role, n := range roles {
		for i := range n {
			names = append(names, framework.PodName(job, role, i, 0))
		}
	}
	slices.Sort(names)
	return names
}

// waitForPods waits until the job's live pods are exactly names (slot
// names: gangNames), each named for the incarnation it carries, and those
// in replaced are new pods (UIDs other than in before); returns them.
func waitForPods(t *testing.T, job *v1alpha1.TrainingJob, names []string, before map[string]types.UID, replaced ...string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, fmt.Sprintf("pods %v of %s", names, job.Name), func(ctx context.Context) (bool, string, error) {
		var err error
		if pods, err = jobPods(ctx, job); err != nil {
			return false, "", err
		}
		saw := fmt.Sprintf("pods %v", podNames(pods))
		if !slices.Equal(slotNames(pods), names) {
			return false, saw, nil
		}
		for i := range pods {
			p := &pods[i]
			inc, _ := strconv.Atoi(p.Labels[lockstep.LabelIncarnation])
			i, _ := strconv.Atoi(p.Labels[lockstep.LabelReplicaIndex])
			role := v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType])
			if p.Name != framework.PodName(job.Name, role, int32(i), int32(inc)) && p.Name != slotName(p) {
				t.Errorf("pod %s of incarnation %d is named for neither it nor incarnation 0", p.Name, inc)
			}
			if slices.Contains(replaced, slotName(p)) && p.UID == before[slotName(p)] {
				return false, saw + "; " + p.Name + " not recreated yet", nil
			}
		}
		return true, saw, nil
	})
	return pods
}

// waitForJob waits until cond holds on the job in the apiserver; returns it.
func waitForJob(t *testing.T, job *v1alpha1.TrainingJob, what string, cond func(*v1alpha1.TrainingJob) bool) *v1alpha1.TrainingJob {
	t.Helper()
	var j *v1alpha1.TrainingJob
	eventually(t, fmt.Sprintf("%s of TrainingJob %s", what, job.Name), func(ctx context.Context) (bool, string, error) {
		var err error
		if j, err = getJob(ctx, job); err != nil {
			return false, "", err
		}
		return cond(j), describeJob(j), nil
	})
	return j
}

func describeJob(j *v1alpha1.TrainingJob) string {
	var conds []string
	for _, c := range j.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("state %q restartCount %d conditions %v", j.Status.State, j.Status.RestartCount, conds)
}

func conditionIs(t v1alpha1.JobState, status metav1.ConditionStatus) func(*v1alpha1.TrainingJob) bool {
	return func(j *v1alpha1.TrainingJob) bool {
		c := meta.FindStatusCondition(j.Status.Conditions, string(t))
		return c != nil && c.Status == status
	}
}

// setPodPhase moves a pod to phase through the status subresource, as the
// kubelet does: Running with its container running, Succeeded or Failed
// with its container terminated with exitCode.
func setPodPhase(t *testing.T, ns, name string, phase corev1.PodPhase, exitCode int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := livePod(context.Background(), ns, name)
		if err != nil {
			return err
		}
		now := metav1.Now()
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			reason := "Completed"
			if exitCode != 0 {
				reason = "Error"
			}
			state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: reason, StartedAt: now, FinishedAt: now}}
		}
		p.Status.Phase = phase
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.Image, State: state, Ready: phase == corev1.PodRunning})
		}
		return harness.api.Status().Update(context.Background(), p)
	})
	if err != nil {
		t.Fatalf("setting pod %s/%s %s: %v", ns, name, phase, err)
	}
}

// runGang moves every pod of the job to Running and waits for the job's
// Running condition.
func runGang(t *testing.T, job *v1alpha1.TrainingJob, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		setPodPhase(t, p.Namespace, p.Name, corev1.PodRunning, 0)
	}
	waitForJob(t, job, "Running", conditionIs(v1alpha1.JobRunning, metav1.ConditionTrue))
}

// checkControlledByJob checks that obj's only owner is the job, as its
// controller, with blockOwnerDeletion: what lets the garbage collector
// delete it with the job (foreground deletion waiting for it).
func checkControlledByJob(t *testing.T, obj client.Object, job *v1alpha1.TrainingJob) {
	t.Helper()
	want := []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job.Name, UID: job.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	if diff := cmp.Diff(want, obj.GetOwnerReferences()); diff != "" {
		t.Errorf("%T %s: owner references (-want +got):\n%s", obj, obj.GetName(), diff)
	}
}

// envtestPod is what the tests check of a pod the controller created.
type envtestPod struct {
	Name, Role, Index, JobLabel, PodGroupLabel, SchedulerName, Subdomain string
	RestartPolicy                                                        corev1.RestartPolicy
	GPULimit                                                             string
}

func TestEnvtestCreatesTheGang(t *testing.T) {
	ns := envtestNamespace(t)
	for _, tc := range []struct {
		name          string
		job           *v1alpha1.TrainingJob
		roles         map[v1alpha1.ReplicaType]int32
		gpus          map[v1alpha1.ReplicaType]string
		wantMinMember int32
		wantGPUs      string
		// wantConfigMaps and wantSecrets are the adapter's auxiliary objects.
		wantConfigMaps, wantSecrets []string
	}{{
		name:          "PyTorch master and workers",
		job:           pyTorchJob(ns, "llama"),
		roles:         map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3},
		gpus:          map[v1alpha1.ReplicaType]string{v1alpha1.ReplicaMaster: "8", v1alpha1.ReplicaWorker: "8"},
		wantMinMember: 4,
		wantGPUs:      "32",
	}, {
		name: "PyTorch with minAvailable",
		job: pyTorchJob(ns, "elastic-min", func(j *v1alpha1.TrainingJob) {
			runPolicy(j).SchedulingPolicy = &v1alpha1.SchedulingPolicy{MinAvailable: ptr.To[int32](2)}
		}),
		roles:         map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3},
		gpus:          map[v1alpha1.ReplicaType]string{v1alpha1.ReplicaMaster: "8", v1alpha1.ReplicaWorker: "8"},
		wantMinMember: 2,
		wantGPUs:      "32",
	}, {
		name:           "MPI launcher and workers",
		job:            mpiJob(ns, "allreduce"),
		roles:          map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaLauncher: 1, v1alpha1.ReplicaWorker: 2},
		gpus:           map[v1alpha1.ReplicaType]string{v1alpha1.ReplicaWorker: "8"},
		wantMinMember:  3,
		wantGPUs:       "16",
		wantConfigMaps: []string{"allreduce-config"},
		wantSecrets:    []string{"allreduce-ssh"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			job := createJob(t, tc.job)
			names := gangNames(job.Name, tc.roles)
			pods := waitForPods(t, job, names, nil)
			ctx := context.Background()

			var want, got []envtestPod
			for role, n := range tc.roles {
				for i := range n {
					want = append(want, envtestPod{
						Name: framework.PodName(job.Name, role, i, 0), Role: string(role), Index: strconv.Itoa(int(i)),
						JobLabel: job.Name, PodGroupLabel: job.Name, SchedulerName: lockstep.SchedulerName,
						Subdomain: job.Name, RestartPolicy: corev1.RestartPolicyNever, GPULimit: tc.gpus[role],
					})
				}
			}
			slices.SortFunc(want, func(a, b envtestPod) int { return strings.Compare(a.Name, b.Name) })
			for _, p := range pods {
				gpu := ""
				if q, ok := p.Spec.Containers[0].Resources.Limits[lockstep.GPUResource]; ok {
					gpu = q.String()
				}
				got = append(got, envtestPod{
					Name: p.Name, Role: p.Labels[lockstep.LabelReplicaType], Index: p.Labels[lockstep.LabelReplicaIndex],
					JobLabel: p.Labels[lockstep.LabelJobName], PodGroupLabel: p.Labels[schedv1alpha1.PodGroupLabel],
					SchedulerName: p.Spec.SchedulerName, Subdomain: p.Spec.Subdomain,
					RestartPolicy: p.Spec.RestartPolicy, GPULimit: gpu,
				})
				checkControlledByJob(t, &p, job)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}

			var pg schedv1alpha1.PodGroup
			if err := harness.api.Get(ctx, client.ObjectKeyFromObject(job), &pg); err != nil {
				t.Fatalf("getting the PodGroup: %v", err)
			}
			gpus := pg.Spec.MinResources[lockstep.GPUResource]
			if pg.Spec.MinMember != tc.wantMinMember || gpus.Cmp(resource.MustParse(tc.wantGPUs)) != 0 {
				t.Errorf("PodGroup minMember %d, %s GPUs; want %d, %s", pg.Spec.MinMember, gpus.String(), tc.wantMinMember, tc.wantGPUs)
			}
			checkControlledByJob(t, &pg, job)

			var svc corev1.Service
			if err := harness.api.Get(ctx, client.ObjectKeyFromObject(job), &svc); err != nil {
				t.Fatalf("getting the Service: %v", err)
			}
			if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
				t.Errorf("Service clusterIP %q publishNotReadyAddresses %t; want headless, publishing not-ready pods", svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
			}
			checkControlledByJob(t, &svc, job)

			ours := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{lockstep.LabelJobName: job.Name}}
			var cms corev1.ConfigMapList
			var secrets corev1.SecretList
			if err := harness.api.List(ctx, &cms, ours...); err != nil {
				t.Fatal(err)
			}
			if err := harness.api.List(ctx, &secrets, ours...); err != nil {
				t.Fatal(err)
			}
			var cmNames, secretNames []string
			for i := range cms.Items {
				cmNames = append(cmNames, cms.Items[i].Name)
				checkControlledByJob(t, &cms.Items[i], job)
			}
			for i := range secrets.Items {
				secretNames = append(secretNames, secrets.Items[i].Name)
				checkControlledByJob(t, &secrets.Items[i], job)
			}
			if diff := cmp.Diff(tc.wantConfigMaps, cmNames); diff != "" {
				t.Errorf("ConfigMaps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSecrets, secretNames); diff != "" {
				t.Errorf("Secrets (-want +got):\n%s", diff)
			}

			j := waitForJob(t, job, "Created", conditionIs(v1alpha1.JobCreated, metav1.ConditionTrue))
			if total := int32(len(names)); j.Status.TotalReplicas != total || j.Status.StartTime == nil {
				t.Errorf("status totalReplicas %d startTime %v; want %d and a start time", j.Status.TotalReplicas, j.Status.StartTime, total)
			}

			runGang(t, job, pods)
		})
	}
}

func TestEnvtestRestartsFailedPods(t *testing.T) {
	ns := envtestNamespace(t)
	all := gangNames("", map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
	for i, tc := range []struct {
		name     string
		mutate   []func(*v1alpha1.TrainingJob)
		fail     string // the pod that fails, without the job's name
		exitCode int32
		// restarted are the pods recreated, without the job's name; the
		// others keep running.
		restarted []string
	}{{
		name:      "gang scope restarts every pod",
		mutate:    []func(*v1alpha1.TrainingJob){withBackoffLimit(3)},
		fail:      "-worker-1",
		exitCode:  1,
		restarted: all,
	}, {
		name: "pod scope restarts the failed pod",
		mutate: []func(*v1alpha1.TrainingJob){withBackoffLimit(3), func(j *v1alpha1.TrainingJob) {
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}},
		fail:      "-worker-2",
		exitCode:  1,
		restarted: []string{"-worker-2"},
	}, {
		name:      "ExitCode retries a signal",
		mutate:    []func(*v1alpha1.TrainingJob){withRestartPolicy(v1alpha1.ReplicaWorker, v1alpha1.RestartExitCode)},
		fail:      "-worker-0",
		exitCode:  137,
		restarted: all,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			job := createJob(t, pyTorchJob(ns, fmt.Sprintf("restart-%d", i), tc.mutate...))
			names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
			pods := waitForPods(t, job, names, nil)
			runGang(t, job, pods)
			before := podUIDs(pods)

			setPodPhase(t, ns, job.Name+tc.fail, corev1.PodFailed, tc.exitCode)
			var restarted []string
			for _, s := range tc.restarted {
				restarted = append(restarted, job.Name+s)
			}
			pods = waitForPods(t, job, names, before, restarted...)
			for _, p := range pods {
				if !slices.Contains(restarted, slotName(&p)) && p.UID != before[slotName(&p)] {
					t.Errorf("pod %s was recreated; only %v should be", p.Name, restarted)
				}
			}
			j := waitForJob(t, job, "restart", func(j *v1alpha1.TrainingJob) bool {
				return j.Status.RestartCount > 0 && conditionIs(v1alpha1.JobRestarting, metav1.ConditionTrue)(j)
			})
			if j.Status.RestartCount != 1 {
				t.Errorf("restartCount %d after one failure; want 1", j.Status.RestartCount)
			}
			if len(restarted) == len(names) {
				var pg schedv1alpha1.PodGroup
				if err := harness.api.Get(context.Background(), client.ObjectKeyFromObject(job), &pg); err != nil {
					t.Fatal(err)
				}
				if pg.Status.Phase != schedv1alpha1.PodGroupPending {
					t.Errorf("PodGroup phase %q after a gang restart; want %q", pg.Status.Phase, schedv1alpha1.PodGroupPending)
				}
			}

			// The new gang runs: the restart is over, counted once, and no
			// pod of the new gang was deleted again.
			runGang(t, job, pods)
			j = waitForJob(t, job, "end of the restart", conditionIs(v1alpha1.JobRestarting, metav1.ConditionFalse))
			if j.Status.RestartCount != 1 || j.Status.State != v1alpha1.JobRunning {
				t.Errorf("after the restart: %s; want Running with restartCount 1", describeJob(j))
			}
			now, err := jobPods(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(podUIDs(pods), podUIDs(now)); diff != "" {
				t.Errorf("the restarted gang changed (-restarted +now):\n%s", diff)
			}
		})
	}
}

func TestEnvtestFailsJob(t *testing.T) {
	ns := envtestNamespace(t)
	type failure struct {
		pod      string // without the job's name
		exitCode int32
	}
	for i, tc := range []struct {
		name   string
		mutate []func(*v1alpha1.TrainingJob)
		// failures fail one after another; all but the last are retried
		// with a gang restart.
		failures     []failure
		wantReason   string
		wantRestarts int32
	}{{
		name:         "backoffLimit exhausted",
		mutate:       []func(*v1alpha1.TrainingJob){withBackoffLimit(1)},
		failures:     []failure{{"-worker-1", 1}, {"-worker-0", 1}},
		wantReason:   ReasonBackoffLimitExceeded,
		wantRestarts: 1,
	}, {
		name:       "backoffLimit 0",
		mutate:     []func(*v1alpha1.TrainingJob){withBackoffLimit(0)},
		failures:   []failure{{"-master-0", 2}},
		wantReason: ReasonBackoffLimitExceeded,
	}, {
		name:       "restartPolicy Never",
		mutate:     []func(*v1alpha1.TrainingJob){withRestartPolicy(v1alpha1.ReplicaWorker, v1alpha1.RestartNever)},
		failures:   []failure{{"-worker-2", 1}},
		wantReason: "WorkerFailed",
	}, {
		name:       "ExitCode does not retry a program error",
		mutate:     []func(*v1alpha1.TrainingJob){withRestartPolicy(v1alpha1.ReplicaWorker, v1alpha1.RestartExitCode)},
		failures:   []failure{{"-worker-1", 1}},
		wantReason: "WorkerFailed",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			job := createJob(t, pyTorchJob(ns, fmt.Sprintf("fail-%d", i), tc.mutate...))
			names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
			pods := waitForPods(t, job, names, nil)
			runGang(t, job, pods)
			for n, f := range tc.failures[:len(tc.failures)-1] {
				setPodPhase(t, ns, job.Name+f.pod, corev1.PodFailed, f.exitCode)
				pods = waitForPods(t, job, names, podUIDs(pods), names...)
				waitForJob(t, job, fmt.Sprintf("restart %d", n+1), func(j *v1alpha1.TrainingJob) bool {
					return j.Status.RestartCount == int32(n+1)
				})
				runGang(t, job, pods)
			}
			last := tc.failures[len(tc.failures)-1]
			setPodPhase(t, ns, job.Name+last.pod, corev1.PodFailed, last.exitCode)

			j := waitForJob(t, job, "Failed", conditionIs(v1alpha1.JobFailed, metav1.ConditionTrue))
			c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobFailed))
			if c.Reason != tc.wantReason || j.Status.RestartCount != tc.wantRestarts || j.Status.State != v1alpha1.JobFailed || j.Status.CompletionTime == nil {
				t.Errorf("failed job: %s, completionTime %v; want reason %s, restartCount %d and a completion time",
					describeJob(j), j.Status.CompletionTime, tc.wantReason, tc.wantRestarts)
			}
			for _, s := range []v1alpha1.JobState{v1alpha1.JobRunning, v1alpha1.JobRestarting} {
				if meta.IsStatusConditionTrue(j.Status.Conditions, string(s)) {
					t.Errorf("failed job still %s: %s", s, describeJob(j))
				}
			}
			// A failed job's running pods are stopped whatever the
			// cleanPodPolicy (None here); the failed pod is kept. The pass
			// that deletes the others would delete it too.
			waitForPods(t, job, []string{job.Name + last.pod}, nil)
		})
	}
}

func TestEnvtestSuspendAndResume(t *testing.T) {
	ns := envtestNamespace(t)
	for i, tc := range []struct {
		name            string
		createSuspended bool
	}{
		{name: "suspend a running job"},
		{name: "create suspended", createSuspended: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := createJob(t, pyTorchJob(ns, fmt.Sprintf("suspend-%d", i), func(j *v1alpha1.TrainingJob) {
				runPolicy(j).Suspend = ptr.To(tc.createSuspended)
			}))
			names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
			var before map[string]types.UID
			if !tc.createSuspended {
				pods := waitForPods(t, job, names, nil)
				runGang(t, job, pods)
				before = podUIDs(pods)
				setSuspend(t, job, true)
			}

			j := waitForJob(t, job, "Suspended", func(j *v1alpha1.TrainingJob) bool {
				return conditionIs(v1alpha1.JobSuspended, metav1.ConditionTrue)(j) && j.Status.ObservedGeneration == j.Generation
			})
			if j.Status.State != v1alpha1.JobSuspended || j.Status.StartTime != nil ||
				meta.IsStatusConditionTrue(j.Status.Conditions, string(v1alpha1.JobRunning)) {
				t.Errorf("suspended job: %s, startTime %v; want state Suspended, not Running, no start time", describeJob(j), j.Status.StartTime)
			}
			// The pods go (at once: none is bound to a node) and, the job
			// suspended, none comes back.
			waitForPods(t, job, nil, nil)

			setSuspend(t, job, false)
			waitForPods(t, job, names, before, names...)
			j = waitForJob(t, job, "resumed", func(j *v1alpha1.TrainingJob) bool {
				c := meta.FindStatusCondition(j.Status.Conditions, string(v1alpha1.JobSuspended))
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonResumed && j.Status.StartTime != nil
			})
			if j.Status.State == v1alpha1.JobSuspended {
				t.Errorf("resumed job: %s; want it no longer Suspended", describeJob(j))
			}
		})
	}
}

func setSuspend(t *testing.T, job *v1alpha1.TrainingJob, suspend bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"runPolicy":{"suspend":%t}}}`, suspend)
	if err := harness.api.Patch(context.Background(), job.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("setting suspend=%t on %s: %v", suspend, job.Name, err)
	}
}

func TestEnvtestFinishedJobCleanup(t *testing.T) {
	ns := envtestNamespace(t)
	for i, tc := range []struct {
		name   string
		policy v1alpha1.CleanPodPolicy
		ttl    *int32
		// kept are the pods left once the job succeeded, without the job's
		// name.
		kept []string
	}{{
		name:   "cleanPodPolicy None keeps the pods",
		policy: v1alpha1.CleanPodPolicyNone,
		kept:   []string{"-master-0", "-worker-0", "-worker-1", "-worker-2"},
	}, {
		name:   "cleanPodPolicy Running deletes the running pods",
		policy: v1alpha1.CleanPodPolicyRunning,
		kept:   []string{"-master-0"},
	}, {
		name:   "cleanPodPolicy All deletes every pod",
		policy: v1alpha1.CleanPodPolicyAll,
	}, {
		name:   "ttlSecondsAfterFinished 0 and cleanPodPolicy All delete job and pods",
		policy: v1alpha1.CleanPodPolicyAll,
		ttl:    ptr.To[int32](0),
	}, {
		name:   "ttlSecondsAfterFinished 0 leaves the pods to the garbage collector",
		policy: v1alpha1.CleanPodPolicyNone,
		ttl:    ptr.To[int32](0),
		kept:   []string{"-master-0", "-worker-0", "-worker-1", "-worker-2"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			job := createJob(t, pyTorchJob(ns, fmt.Sprintf("done-%d", i), func(j *v1alpha1.TrainingJob) {
				runPolicy(j).CleanPodPolicy = ptr.To(tc.policy)
				runPolicy(j).TTLSecondsAfterFinished = tc.ttl
			}))
			names := gangNames(job.Name, map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3})
			pods := waitForPods(t, job, names, nil)
			runGang(t, job, pods)
			// The Master decides a PyTorch job: its success is the job's.
			setPodPhase(t, ns, job.Name+"-master-0", corev1.PodSucceeded, 0)

			if tc.ttl != nil {
				eventually(t, "the job's deletion", func(ctx context.Context) (bool, string, error) {
					j, err := getJob(ctx, job)
					if apierrors.IsNotFound(err) {
						return true, "gone", nil
					}
					if err != nil {
						return false, "", err
					}
					return false, describeJob(j), nil
				})
			} else {
				j := waitForJob(t, job, "Succeeded", conditionIs(v1alpha1.JobSucceeded, metav1.ConditionTrue))
				if j.Status.State != v1alpha1.JobSucceeded || j.Status.CompletionTime == nil {
					t.Errorf("succeeded job: %s, completionTime %v", describeJob(j), j.Status.CompletionTime)
				}
			}
			// The pods go on the pass after the one that records the
			// outcome, in one go, before the job itself (TTL): once some
			// are gone or the job is, what is left stays. (Under None,
			// nothing shows that pass; the test only checks the pods are
			// there once the job has succeeded.)
			var want []string
			for _, s := range tc.kept {
				want = append(want, job.Name+s)
			}
			now := waitForPods(t, job, want, nil)
			// Pods left behind carry what the garbage collector needs to
			// delete them with the job.
			for i := range now {
				checkControlledByJob(t, &now[i], job)
			}
		})
	}
}

// bindPod binds a pod to a node, as the scheduler does. Nodes need not
// exist for the binding; a bound pod's deletion waits for its kubelet.
func bindPod(t *testing.T, p *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := harness.api.SubResource("binding").Create(context.Background(), p, b); err != nil {
		t.Fatalf("binding pod %s to %s: %v", p.Name, node, err)
	}
}

// A gang restart of bound pods goes as on a cluster: the running pods
// terminate until their kubelets say they have stopped, the restart is
// counted once however their phases change meanwhile, and the gang comes
// back once the old pods are gone.
func TestEnvtestGangRestartWaitsForTerminatingPods(t *testing.T) {
	job, pods, names := runningGang(t, "graceful", 3, 30)
	ns := job.Namespace
	before := podUIDs(pods)

	failed := job.Name + "-worker-1"
	setPodPhase(t, ns, failed, corev1.PodFailed, 1)

	// The failed pod goes at once (the apiserver marks it deleted with a
	// zero grace period, then removes it: it may be seen terminating for a
	// moment); the others terminate, waiting for their kubelets.
	var terminating []corev1.Pod
	eventually(t, "the old gang terminating", func(ctx context.Context) (bool, string, error) {
		var list corev1.PodList
		if err := harness.api.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{lockstep.LabelJobName: job.Name}); err != nil {
			return false, "", err
		}
		terminating = nil
		for _, p := range list.Items {
			if p.Name != failed && p.UID == before[p.Name] && p.DeletionTimestamp != nil {
				terminating = append(terminating, p)
			}
		}
		return len(terminating) == len(names)-1, fmt.Sprintf("%d of %d old pods terminating", len(terminating), len(names)-1), nil
	})
	j := waitForJob(t, job, "restart", conditionIs(v1alpha1.JobRestarting, metav1.ConditionTrue))
	if j.Status.RestartCount != 1 {
		t.Errorf("restartCount %d after one failure; want 1", j.Status.RestartCount)
	}

	// Each kubelet kills its containers (SIGTERM: exit 143), reports the
	// pod Failed, then removes it.
	for _, p := range terminating {
		setPodPhase(t, ns, p.Name, corev1.PodFailed, 143)
		if err := harness.api.Delete(context.Background(), &p, client.GracePeriodSeconds(0),
			client.Preconditions{UID: &p.UID}); err != nil {
			t.Fatalf("removing terminated pod %s: %v", p.Name, err)
		}
	}
	pods = waitForPods(t, job, names, before, names...)
	runGang(t, job, pods)
	j = waitForJob(t, job, "end of the restart", conditionIs(v1alpha1.JobRestarting, metav1.ConditionFalse))
	if j.Status.RestartCount != 1 {
		t.Errorf("after the restart: %s; want restartCount 1: the old pods' failures while terminating are not new failures", describeJob(j))
	}
	now, err := jobPods(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(podUIDs(pods), podUIDs(now)); diff != "" {
		t.Errorf("the restarted gang changed (-restarted +now):\n%s", diff)
	}
}
