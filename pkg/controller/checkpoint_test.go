package controller

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// report is a checkpoint report's wire form.
func report(step int64, at time.Time, loc string) string {
	return lockstep.Checkpoint{Step: step, Time: at, Location: loc}.Format()
}

// reporting gives pod its incarnation label and a report in its
// annotation.
func reporting(p *corev1.Pod, incarnation int32, raw string) *corev1.Pod {
	p.Labels[lockstep.LabelIncarnation] = fmt.Sprint(incarnation)
	if raw != "" {
		p.Annotations = map[string]string{lockstep.AnnotationCheckpoint: raw}
	}
	return p
}

// ranked gives pod its global rank annotation.
func ranked(p *corev1.Pod, rank int) *corev1.Pod {
	p.Annotations[lockstep.AnnotationRank] = fmt.Sprint(rank)
	return p
}

// created sets pod's creation time.
func created(p *corev1.Pod, at time.Time) *corev1.Pod {
	p.CreationTimestamp = metav1.NewTime(at)
	return p
}

// exitedWith gives pod a container that exited with msg as its termination
// message, in its last run (last) or its current state.
func exitedWith(p *corev1.Pod, msg string, last bool) *corev1.Pod {
	t := &corev1.ContainerStateTerminated{ExitCode: 143, Message: msg}
	cs := corev1.ContainerStatus{Name: "pytorch"}
	if last {
		cs.LastTerminationState.Terminated = t
	} else {
		cs.State.Terminated = t
	}
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
	return p
}

func TestFoldCheckpoints(t *testing.T) {
	now := t0.Add(3 * time.Hour)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	status := func(pod string, role v1alpha1.ReplicaType, index, inc int32, step int64, when time.Time, loc string, src v1alpha1.CheckpointSource) *v1alpha1.CheckpointStatus {
		return &v1alpha1.CheckpointStatus{Step: step, Time: metav1.NewTime(when), Location: loc, Pod: pod,
			ReplicaType: role, Index: index, Incarnation: inc, Source: src}
	}
	master, worker0, worker1 := framework.PodName("j", v1alpha1.ReplicaMaster, 0, 0), framework.PodName("j", v1alpha1.ReplicaWorker, 0, 0), framework.PodName("j", v1alpha1.ReplicaWorker, 1, 0)
	earlier := status(master, v1alpha1.ReplicaMaster, 0, 2, 100, at(-30*time.Minute), "s3://b/100", v1alpha1.CheckpointFromAnnotation)
	for _, tc := range []struct {
		name        string
		restarts    int32
		scope       v1alpha1.RestartScope
		current     *v1alpha1.CheckpointStatus
		pods        []*corev1.Pod
		want        *v1alpha1.CheckpointStatus
		faultFields []string
	}{
		{
			name:  "no reports",
			scope: v1alpha1.RestartScopeGang,
			pods:  testGang(corev1.PodRunning, corev1.PodRunning, corev1.PodRunning),
		},
		{
			name:     "the newest of the ranks' reports",
			restarts: 2, scope: v1alpha1.RestartScopeGang,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0), 2, report(200, at(-10*time.Minute), "s3://b/200")),
				ranked(reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 2, report(300, at(-time.Minute), "s3://b/300")), 1),
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 2, ""),
			},
			want: func() *v1alpha1.CheckpointStatus {
				st := status(worker0, v1alpha1.ReplicaWorker, 0, 2, 300, at(-time.Minute), "s3://b/300", v1alpha1.CheckpointFromAnnotation)
				st.Rank = ptr.To[int32](1)
				return st
			}(),
		},
		{
			name:     "a report no newer than the status is not taken",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 2, report(90, at(-40*time.Minute), "s3://b/90")),
			},
			want: earlier,
		},
		{
			// A rank of incarnation 1 still running on a partitioned node
			// beside incarnation 2: its checkpoint is not the new one's.
			// Incarnation 0's are older still.
			name:     "an earlier incarnation's report after the new one was created is not read",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				created(reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0), 2, ""), at(-5*time.Minute)),
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 1, report(900, at(-time.Minute), "s3://b/900")),
				exitedWith(reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodFailed, 0), 1, ""),
					lockstep.CheckpointMessagePrefix+report(901, at(0), "s3://b/901"), false),
				reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 0, report(902, at(-10*time.Minute), "s3://b/902")),
			},
			want: earlier,
		},
		{
			// The ranks of a gang being restarted checkpoint on SIGTERM,
			// after the restart was decided and before the new
			// incarnation's pods exist.
			name:     "the stopping incarnation's reports before the new one count",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				exitedWith(reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodFailed, 0), 1, ""),
					lockstep.CheckpointMessagePrefix+report(250, at(-10*time.Second), "s3://b/250"), false),
				created(reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodPending, 0), 2, ""), at(-5*time.Second)),
			},
			want: status(master, v1alpha1.ReplicaMaster, 0, 1, 250, at(-10*time.Second), "s3://b/250", v1alpha1.CheckpointFromTerminationMessage),
		},
		{
			name:     "under a pod scope every pod's report counts",
			restarts: 2, scope: v1alpha1.RestartScopePod, current: earlier,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 1, report(900, at(-time.Minute), "s3://b/900")),
			},
			want: status(worker1, v1alpha1.ReplicaWorker, 1, 1, 900, at(-time.Minute), "s3://b/900", v1alpha1.CheckpointFromAnnotation),
		},
		{
			name:     "a report made while exiting, in the termination message",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				exitedWith(reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodFailed, 0), 2, ""),
					"caught SIGTERM\n"+lockstep.CheckpointMessagePrefix+report(150, at(-2*time.Second), "s3://b/150"), false),
				exitedWith(reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 2, ""),
					lockstep.CheckpointMessagePrefix+report(140, at(-5*time.Minute), "s3://b/140"), true),
			},
			want: status(master, v1alpha1.ReplicaMaster, 0, 2, 150, at(-2*time.Second), "s3://b/150", v1alpha1.CheckpointFromTerminationMessage),
		},
		{
			name:     "bad reports are faults and change nothing",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0), 2, `{"step": 5, "time": "now", "location": "s3://b/5"}`),
				reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 2, report(6, at(time.Hour), "s3://b/6")),
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 2, `{"step": 7, "time": "2026-01-01T02:00:00Z", "location": "b/7"}`),
			},
			want:        earlier,
			faultFields: []string{"time:", "time:", "location:"},
		},
		{
			name:     "a clock a little ahead is believed",
			restarts: 2, scope: v1alpha1.RestartScopeGang, current: earlier,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodRunning, 0), 2, report(400, at(30*time.Second), "s3://b/400")),
			},
			want: status(master, v1alpha1.ReplicaMaster, 0, 2, 400, at(30*time.Second), "s3://b/400", v1alpha1.CheckpointFromAnnotation),
		},
		{
			name:     "the same checkpoint from two ranks: one, every time",
			restarts: 2, scope: v1alpha1.RestartScopeGang,
			pods: []*corev1.Pod{
				reporting(testPod(v1alpha1.ReplicaWorker, 1, corev1.PodRunning, 0), 2, report(500, at(-time.Minute), "s3://b/500")),
				reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 2, report(500, at(-time.Minute), "s3://b/500")),
			},
			want: status(worker0, v1alpha1.ReplicaWorker, 0, 2, 500, at(-time.Minute), "s3://b/500", v1alpha1.CheckpointFromAnnotation),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(v1alpha1.RestartOnFailure, func(j *v1alpha1.TrainingJob) {
				j.Status.RestartCount = tc.restarts
				j.Status.Checkpoint = tc.current
			})
			got, faults := newestCheckpoint(job.Status.Checkpoint, checkpointReports(job, tc.pods, tc.scope), now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checkpoint (-want +got):\n%s", diff)
			}
			var fields []string
			for _, f := range faults {
				field, _, _ := strings.Cut(f.err.Error(), " ")
				fields = append(fields, field)
			}
			if diff := cmp.Diff(tc.faultFields, fields); diff != "" {
				t.Errorf("faults (-want +got):\n%s\n%v", diff, faults)
			}
		})
	}
}

func TestCheckpointWarnedOnce(t *testing.T) {
	var w checkpointWarnings
	if !w.first("job", "pod", "x") || w.first("job", "pod", "x") {
		t.Error("the same report was not warned about exactly once")
	}
	if !w.first("job", "pod", "y") || !w.first("job", "other", "x") {
		t.Error("another report, or another pod's, was not warned about")
	}
	w.forget("job")
	if !w.first("job", "pod", "x") {
		t.Error("a forgotten job's report was not warned about again")
	}
}

func TestDesiredPodResumes(t *testing.T) {
	r := fakeReconciler(fake.NewClientBuilder().WithScheme(fakeScheme(t)).Build())
	job := testJob(v1alpha1.RestartOnFailure, func(j *v1alpha1.TrainingJob) {
		j.Status.RestartCount = 3
		if j.Spec.RunPolicy == nil {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{}
		}
		j.Spec.RunPolicy.RestartOverheadSeconds = ptr.To[int32](120)
		j.Spec.RunPolicy.PreemptionNoticeSeconds = ptr.To[int32](90)
		spec := j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
		spec.Template.Spec.InitContainers = []corev1.Container{{Name: "restore", Image: "img"}}
		j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = spec
	})
	a, err := r.Registry.For(job.Spec.Framework)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := r.desiredPod(job, a, v1alpha1.ReplicaWorker, 0, claimGPUs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := envOf(pod.Spec.Containers[0], lockstep.EnvResumeFrom); ok {
		t.Errorf("a job that never checkpointed: %s is set", lockstep.EnvResumeFrom)
	}
	if got := pod.Annotations[lockstep.AnnotationRestartOverhead]; got != "120" {
		t.Errorf("%s = %q, want 120", lockstep.AnnotationRestartOverhead, got)
	}
	if got := lockstep.NoticeOf(pod.Annotations); got != 90*time.Second {
		t.Errorf("the scheduler reads a notice of %s off the pod, want the job's 90s", got)
	}
	job.Status.Checkpoint = &v1alpha1.CheckpointStatus{Step: 4200, Time: metav1.NewTime(t0), Location: "s3://b/4200"}
	pod, err = r.desiredPod(job, a, v1alpha1.ReplicaWorker, 0, claimGPUs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		from, _ := envOf(c, lockstep.EnvResumeFrom)
		step, _ := envOf(c, lockstep.EnvResumeStep)
		if from != "s3://b/4200" || step != "4200" {
			t.Errorf("container %s resumes from %q at step %q, want s3://b/4200 at 4200", c.Name, from, step)
		}
	}
}

func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func TestCheckpointReporter(t *testing.T) {
	job := testJob(v1alpha1.RestartOnFailure, func(j *v1alpha1.TrainingJob) {
		j.Status.RestartCount = 2
		spec := j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
		spec.Template.Spec.ServiceAccountName = "trainer"
		j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = spec
	})
	a, err := framework.NewBuiltinRegistry(rand.Reader).For(job.Spec.Framework)
	if err != nil {
		t.Fatal(err)
	}
	role, binding := checkpointReporter(job, a)
	inc := framework.NameIncarnation(a, job)
	wantRules := []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"},
		ResourceNames: []string{
			framework.PodName("j", v1alpha1.ReplicaMaster, 0, inc),
			framework.PodName("j", v1alpha1.ReplicaWorker, 0, inc),
			framework.PodName("j", v1alpha1.ReplicaWorker, 1, inc),
		},
	}}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	wantSubjects := []rbacv1.Subject{
		{Kind: "ServiceAccount", Name: "default", Namespace: "ns"},
		{Kind: "ServiceAccount", Name: "trainer", Namespace: "ns"},
	}
	if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
	if role.Name != framework.CheckpointReporterName("j") || binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "Role" {
		t.Errorf("role %s, binding of %s %s", role.Name, binding.RoleRef.Kind, binding.RoleRef.Name)
	}
}

// TestHeardReportsOutliveThePod: a report the pod events showed is read
// once the cache no longer lists its pod, with the listed pods, until its
// incarnation no longer counts.
func TestHeardReportsOutliveThePod(t *testing.T) {
	job := testJob(v1alpha1.RestartOnFailure, func(j *v1alpha1.TrainingJob) { j.Status.RestartCount = 1 })
	owned := func(p *corev1.Pod) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "lockstep.dev/v1alpha1", Kind: "TrainingJob", Name: "j", UID: job.UID, Controller: ptr.To(true)}}
		return p
	}
	var h heardReports
	quiet := owned(reporting(testPod(v1alpha1.ReplicaWorker, 0, corev1.PodRunning, 0), 1, ""))
	h.note(quiet)
	leaving := owned(exitedWith(reporting(testPod(v1alpha1.ReplicaMaster, 0, corev1.PodFailed, 0), 1, ""),
		lockstep.CheckpointMessagePrefix+report(77, t0, "s3://b/77"), false))
	h.note(leaving)
	got := h.with(job, []*corev1.Pod{quiet})
	if len(got) != 2 || got[1].UID != leaving.UID {
		t.Fatalf("with the cache listing only %s: %d pods, want it and the heard %s", quiet.Name, len(got), leaving.Name)
	}
	reports := checkpointReports(job, got, v1alpha1.RestartScopeGang)
	if len(reports) != 1 || reports[0].status.Step != 77 || reports[0].err != nil {
		t.Errorf("reports %+v, want the heard pod's step 77", reports)
	}
	if got := h.with(job, []*corev1.Pod{leaving, quiet}); len(got) != 2 {
		t.Errorf("a heard pod the cache lists is read twice: %d pods", len(got))
	}
	job.Status.RestartCount = 3
	if got := h.with(job, nil); len(got) != 0 {
		t.Errorf("a heard pod of incarnation 1 under restartCount 3: still read")
	}
}
