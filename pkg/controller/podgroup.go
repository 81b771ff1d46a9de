package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/util/syncmap"
)

// minMember is how many pods the gang needs placed together: minAvailable
// when set; else every pod, but an elastic job only its minReplicas
// Workers, as Kubeflow sizes an elastic job's PodGroup. The Workers above
// that join as they are placed, beside the others, and a resize within
// the bounds is neither a new gang nor a restart.
func minMember(job *v1alpha1.TrainingJob) int32 {
	if sp := job.Spec.RunPolicy.SchedulingPolicy; sp != nil && sp.MinAvailable != nil {
		return *sp.MinAvailable
	}
	var n int32
	for role := range job.Spec.ReplicaSpecs {
		n += gangReplicas(job, role)
	}
	return n
}

// gangReplicas is how many of a role's pods the gang needs: its replicas,
// or an elastic job's minReplicas Workers.
func gangReplicas(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType) int32 {
	spec := job.Spec.ReplicaSpecs[role]
	n := spec.DesiredReplicas()
	if e := job.Spec.ElasticPolicy; e != nil && role == v1alpha1.ReplicaWorker && e.MinReplicas != nil {
		n = min(n, *e.MinReplicas)
	}
	return n
}

// desiredPodGroup is the job's PodGroup: the gang's size and resources, its
// schedule timeout, and the topology constraint as annotations the
// scheduler's topology plugin reads. minResources counts every pod the gang
// needs (gangReplicas) in full: init containers and overhead as the
// scheduler counts them.
//
// Without spec.topology, Kueue TAS's annotations on the replica templates
// give the constraint (kueueConstraint); one naming no configured level
// leaves the PodGroup without it, and the job's Scheduled condition says
// why.
func desiredPodGroup(job *v1alpha1.TrainingJob, a framework.Adapter, cfg lockstep.TopologyConfig) (*schedv1alpha1.PodGroup, error) {
	total := corev1.ResourceList{}
	for _, role := range slices.Sorted(maps.Keys(job.Spec.ReplicaSpecs)) {
		n := gangReplicas(job, role)
		if n == 0 {
			continue
		}
		tpl, err := a.PodTemplate(job, role, 0)
		if err != nil {
			return nil, err
		}
		pod := &corev1.Pod{Spec: tpl.Spec}
		defaultRequests(&pod.Spec)
		reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		for name, q := range reqs {
			q.Mul(int64(n))
			sum := total[name]
			sum.Add(q)
			total[name] = sum
		}
	}
	pg := &schedv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace, Labels: map[string]string{lockstep.LabelJobName: job.Name}},
		Spec:       schedv1alpha1.PodGroupSpec{MinMember: minMember(job), MinResources: total},
	}
	if sp := job.Spec.RunPolicy.SchedulingPolicy; sp != nil {
		pg.Spec.ScheduleTimeoutSeconds = sp.ScheduleTimeoutSeconds
	}
	if t := job.Spec.Topology; t != nil {
		pg.Annotations = map[string]string{
			lockstep.AnnotationTopologyLevel: t.Level,
			lockstep.AnnotationTopologyMode:  string(t.Mode),
		}
	} else if level, mode, err := kueueConstraint(job, cfg); err == nil && level != "" {
		pg.Annotations = map[string]string{
			lockstep.AnnotationTopologyLevel: level,
			lockstep.AnnotationTopologyMode:  string(mode),
		}
	}
	return pg, nil
}

// defaultRequests gives every container the requests the API server will
// default from its limits (GPUs are usually given as limits only), so the
// template counts as the pod will.
func defaultRequests(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for name, q := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; ok {
					continue
				}
				if c.Resources.Requests == nil {
					c.Resources.Requests = corev1.ResourceList{}
				}
				c.Resources.Requests[name] = q.DeepCopy()
			}
		}
	}
}

// topologyAnnotations picks the PodGroup annotations the controller owns:
// the topology constraint. The scheduler's placement annotations are left
// alone.
func topologyAnnotations(annotations map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{lockstep.AnnotationTopologyLevel, lockstep.AnnotationTopologyMode} {
		if v, ok := annotations[k]; ok {
			out[k] = v
		}
	}
	return out
}

// ensurePodGroup creates the PodGroup or brings its spec and topology
// annotations up to date, writing only when they differ. It returns the
// PodGroup's status as the cache held it (none for one just created).
func (r *TrainingJobReconciler) ensurePodGroup(ctx context.Context, job *v1alpha1.TrainingJob) (schedv1alpha1.PodGroupStatus, error) {
	a, err := r.Registry.For(job.Spec.Framework)
	if err != nil {
		return schedv1alpha1.PodGroupStatus{}, err
	}
	want, err := desiredPodGroup(job, a, r.Topology)
	if err != nil {
		return schedv1alpha1.PodGroupStatus{}, fmt.Errorf("PodGroup of %s: %w", klog.KObj(job), err)
	}
	var have schedv1alpha1.PodGroup
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := controllerutil.SetControllerReference(job, want, r.Client.Scheme()); err != nil {
			return schedv1alpha1.PodGroupStatus{}, err
		}
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return schedv1alpha1.PodGroupStatus{}, fmt.Errorf("creating PodGroup %s: %w", klog.KObj(want), err)
		}
		r.Recorder.Eventf(job, corev1.EventTypeNormal, "CreatedPodGroup", "Created PodGroup %s (minMember %d)", want.Name, want.Spec.MinMember)
		return schedv1alpha1.PodGroupStatus{}, nil
	case err != nil:
		return schedv1alpha1.PodGroupStatus{}, fmt.Errorf("getting PodGroup %s: %w", klog.KObj(want), err)
	}
	annotationsWant, annotationsHave := topologyAnnotations(want.Annotations), topologyAnnotations(have.Annotations)
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) && maps.Equal(annotationsHave, annotationsWant) {
		return have.Status, nil
	}
	have.Spec = want.Spec
	for k := range annotationsHave {
		delete(have.Annotations, k)
	}
	if len(annotationsWant) > 0 && have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	maps.Copy(have.Annotations, annotationsWant)
	if err := r.Client.Update(ctx, &have); err != nil {
		return schedv1alpha1.PodGroupStatus{}, fmt.Errorf("updating PodGroup %s: %w", klog.KObj(&have), err)
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, "UpdatedPodGroup", "Updated PodGroup %s (minMember %d)", have.Name, have.Spec.MinMember)
	return have.Status, nil
}

// podGroupEnded says whether upstream's PodGroup controller has put a
// PodGroup in a phase it never leaves: it does not reconcile a Failed or
// Finished group again.
func podGroupEnded(phase schedv1alpha1.PodGroupPhase) bool {
	return phase == schedv1alpha1.PodGroupFailed || phase == schedv1alpha1.PodGroupFinished
}

// podGroupNeedsRearm says whether the PodGroup's status (pg) was left
// Failed or Finished under a gang that has neither failed nor finished:
// the pods of this incarnation are all that is left of the gang (nothing
// stale nor terminating, which upstream's controller would count too),
// none failed, and fewer than minMember succeeded, so by upstream's own
// rules the group is not over. It happens after a gang restart: the
// restart resets the status (resetPodGroupStatus), but upstream's
// controller may have read the group and the failed pod before the reset
// and patch Failed over it (its patch takes no resourceVersion), or
// reconcile once more while the deleted pods are still in the cache.
func podGroupNeedsRearm(pg schedv1alpha1.PodGroupStatus, minMember int32, obs observation) bool {
	if !podGroupEnded(pg.Phase) || obs.terminating > 0 || len(obs.stale) > 0 || obs.staleTerminating > 0 {
		return false
	}
	var succeeded int32
	for _, p := range obs.live {
		switch p.Status.Phase {
		case corev1.PodFailed:
			return false
		case corev1.PodSucceeded:
			succeeded++
		}
	}
	return succeeded < minMember
}

// maxRearms bounds the re-arms of one incarnation's PodGroup. One is what
// the restart race needs; a group upstream keeps ending under a gang that
// has not (its controller counts the pods of every namespace that carry
// the group's name, so a failed pod of a same-named job elsewhere ends
// this one on each of its reconciles) would otherwise be re-armed on every
// one of them.
const maxRearms = 3

// rearms counts the re-arms of each job's PodGroup in its current
// incarnation (restartCount), in memory: a controller restart allows
// maxRearms more.
type rearms struct {
	jobs syncmap.Map[types.UID, rearmCount]
}

type rearmCount struct {
	incarnation int32
	n           int
}

// take says whether job's PodGroup may be re-armed once more in this
// incarnation, and counts the re-arm when it may.
func (r *rearms) take(job *v1alpha1.TrainingJob) bool {
	taken := false
	r.jobs.Update(job.UID, func(c rearmCount, _ bool) (rearmCount, bool) {
		if c.incarnation != job.Status.RestartCount {
			c = rearmCount{incarnation: job.Status.RestartCount}
		}
		if c.n < maxRearms {
			c.n++
			taken = true
		}
		return c, true
	})
	return taken
}

func (r *rearms) forget(uid types.UID) {
	r.jobs.Delete(uid)
}

// podGroupEndedPredicate passes a PodGroup's move into Failed or Finished
// (podGroupNeedsRearm decides whether the job's gang says otherwise); its
// other status writes, upstream's counts of the pods, do not.
var podGroupEndedPredicate = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, _ := e.ObjectOld.(*schedv1alpha1.PodGroup)
		updated, _ := e.ObjectNew.(*schedv1alpha1.PodGroup)
		return old != nil && updated != nil && !podGroupEnded(old.Status.Phase) && podGroupEnded(updated.Status.Phase)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// resetPodGroupStatus starts the PodGroup's phase over for a restarted
// gang: the PodGroup controller leaves a Failed group Failed for good.
// Upstream's controller may still write Failed over it; the next pass
// that finds the group ended under a gang that is not re-arms it
// (podGroupNeedsRearm).
func (r *TrainingJobReconciler) resetPodGroupStatus(ctx context.Context, job *v1alpha1.TrainingJob) error {
	pg := &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace}}
	patch := []byte(`{"status":{"phase":"Pending","running":null,"succeeded":null,"failed":null}}`)
	if err := r.Client.Status().Patch(ctx, pg, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("resetting the status of PodGroup %s: %w", klog.KObj(pg), err)
	}
	return nil
}
