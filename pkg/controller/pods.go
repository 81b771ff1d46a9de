package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// listPods returns the job's pods from the cache: those it owns.
func (r *TrainingJobReconciler) listPods(ctx context.Context, job *v1alpha1.TrainingJob) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{lockstep.LabelJobName: job.Name}); err != nil {
		return nil, fmt.Errorf("listing pods of TrainingJob %s: %w", klog.KObj(job), err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], job) {
			pods = append(pods, &list.Items[i])
		}
	}
	return pods, nil
}

// jobOwner is the TrainingJob that controls o, nil when none does.
func jobOwner(o metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "TrainingJob" || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil
	}
	return ref
}

// desiredPod is pod index of role as the controller creates it: the
// adapter's template plus labels, owner, scheduler and restart policy. The
// restart policy is Never whatever the role's: the controller, not the
// kubelet, restarts failed pods, so that the failure policy decides what
// restarts with them and backoffLimit counts every restart. claims size the
// job's GPU claims, for its ComputeDomain.
func (r *TrainingJobReconciler) desiredPod(job *v1alpha1.TrainingJob, a framework.Adapter, role v1alpha1.ReplicaType, index int32, claims claimGPUs) (*corev1.Pod, error) {
	tpl, err := a.PodTemplate(job, role, index)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
	// The template's hostname (framework.PodName): the pod's name in the
	// incarnation it is created under.
	pod.Name = framework.PodName(job.Name, role, index, framework.NameIncarnation(a, job))
	pod.Namespace = job.Namespace
	pod.GenerateName = ""
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[lockstep.LabelJobName] = job.Name
	pod.Labels[lockstep.LabelReplicaType] = string(role)
	pod.Labels[lockstep.LabelReplicaIndex] = strconv.Itoa(int(index))
	pod.Labels[lockstep.LabelIncarnation] = strconv.Itoa(int(job.Status.RestartCount))
	pod.Labels[lockstep.LabelSuspensions] = strconv.Itoa(int(job.Status.Suspensions))
	pod.Labels[schedv1alpha1.PodGroupLabel] = job.Name
	// The rank the pod's environment carries, for the scheduler to place
	// ranks in topology order (docs/scheduler.md, Ranks).
	if rank, ok := a.Rank(job, role, index); ok {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[lockstep.AnnotationRank] = strconv.Itoa(int(rank))
	}
	if plan, ok := planComputeDomain(job, r.Topology, claims); ok {
		addChannelClaim(&pod.Spec, plan.template, claims)
	}
	setIncarnationEnv(&pod.Spec, job.Status.RestartCount)
	setResumeEnv(&pod.Spec, job.Status.Checkpoint)
	setSecondsAnnotation(pod, lockstep.AnnotationRestartOverhead, job.Spec.RunPolicy.RestartOverheadSeconds)
	setSecondsAnnotation(pod, lockstep.AnnotationPreemptionNoticeSeconds, job.Spec.RunPolicy.PreemptionNoticeSeconds)
	pod.Spec.SchedulerName = r.SchedulerName
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	unreachableTolerations(&pod.Spec, unreachableTolerance(job))
	addSearchDomain(&pod.Spec, framework.JobSearchDomain(job, r.ClusterDomain))
	if sp := job.Spec.RunPolicy.SchedulingPolicy; sp != nil && sp.PriorityClass != "" && pod.Spec.PriorityClassName == "" {
		pod.Spec.PriorityClassName = sp.PriorityClass
	}
	if err := controllerutil.SetControllerReference(job, pod, r.Client.Scheme()); err != nil {
		return nil, err
	}
	return pod, nil
}

// setIncarnationEnv gives every container, init containers included (a
// checkpoint restore runs in one), LOCKSTEP_INCARNATION: the incarnation
// the pod is created under, for trainers to namespace what they write.
// Templates may not set it (v1alpha1.ValidateReservedEnv).
func setIncarnationEnv(spec *corev1.PodSpec, incarnation int32) {
	setControllerEnv(spec, corev1.EnvVar{Name: lockstep.EnvIncarnation, Value: strconv.Itoa(int(incarnation))})
}

// setControllerEnv sets vars on every container, init containers included,
// replacing any of the same names: the variables the controller owns
// (lockstep.ReservedEnv).
func setControllerEnv(spec *corev1.PodSpec, vars ...corev1.EnvVar) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Env = slices.DeleteFunc(cs[i].Env, func(e corev1.EnvVar) bool {
				return slices.ContainsFunc(vars, func(v corev1.EnvVar) bool { return v.Name == e.Name })
			})
			cs[i].Env = append(cs[i].Env, vars...)
		}
	}
}

// addSearchDomain lets the pod resolve its peers by bare name, keeping any
// DNS configuration the template has.
func addSearchDomain(spec *corev1.PodSpec, domain string) {
	if spec.DNSConfig == nil {
		spec.DNSConfig = &corev1.PodDNSConfig{}
	}
	if !slices.Contains(spec.DNSConfig.Searches, domain) {
		spec.DNSConfig.Searches = append(spec.DNSConfig.Searches, domain)
	}
}

// ensurePods creates the job's missing pods, in the adapter's role order,
// at most CreateParallelism at a time, claiming from the job's copies of
// the claim templates it has (copies). claims size the job's GPU claims.
// A name still held by a pod being deleted is left for a later pass.
func (r *TrainingJobReconciler) ensurePods(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter, obs observation, copies claimTemplates, claims claimGPUs) (wait time.Duration, err error) {
	var missing []*corev1.Pod
	for _, role := range a.Roles() {
		spec, ok := job.Spec.ReplicaSpecs[role]
		if !ok {
			continue
		}
		for i := range spec.DesiredReplicas() {
			if obs.slots[slot{role, i}] {
				continue
			}
			pod, err := r.desiredPod(job, a, role, i, claims)
			if err != nil {
				return 0, fmt.Errorf("pod %s %d of %s: %w", role, i, klog.KObj(job), err)
			}
			copies.apply(&pod.Spec)
			missing = append(missing, pod)
		}
	}
	if len(missing) == 0 {
		// Also when the pass that created them could not record it (its
		// status write conflicted or failed): without a start time,
		// activeDeadlineSeconds would never run out.
		if job.Status.StartTime == nil {
			now := metav1.NewTime(r.Clock.Now())
			job.Status.StartTime = &now
		}
		markCreated(job)
		clearBackoff(job)
		return 0, nil
	}
	if wait := backoffWait(&job.Status, r.Clock.Now()); wait > 0 {
		ctrl.LoggerFrom(ctx).V(5).Info("Pods wait out the restart backoff", "pods", len(missing), "wait", wait)
		return wait, nil
	}
	if job.Status.StartTime == nil {
		now := metav1.NewTime(r.Clock.Now())
		job.Status.StartTime = &now
	}
	names := make([]string, len(missing))
	for i, p := range missing {
		names[i] = p.Name
	}
	r.expectations.ExpectCreations(job.UID, names...)
	created, _, err := r.forEach(missing, func(p *corev1.Pod) error {
		err := r.Client.Create(ctx, p)
		if err != nil {
			r.expectations.CreationFailed(job.UID, p.Name)
		}
		r.failedCreates.record(job, p.Name, err != nil && !apierrors.IsAlreadyExists(err))
		return err
	})
	if created > 0 {
		r.Recorder.Eventf(job, corev1.EventTypeNormal, "CreatedPods", "Created %d pods", created)
		ctrl.LoggerFrom(ctx).V(2).Info("Created pods", "count", created)
	}
	if err != nil {
		// A template the API server will not turn into a pod (a missing
		// ServiceAccount, a bad volume) fails the same way on every try: say
		// so on the job, and let the workqueue's backoff space the retries.
		msg := fmt.Sprintf("creating pods failed: %v", err)
		r.Recorder.Event(job, corev1.EventTypeWarning, ReasonFailedCreatePod, msg)
		setCondition(&job.Status, job.Generation, v1alpha1.JobCreated, metav1.ConditionFalse, ReasonFailedCreatePod, truncateMessage(msg))
		return 0, fmt.Errorf("creating pods of %s: %w", klog.KObj(job), err)
	}
	markCreated(job)
	clearBackoff(job)
	return 0, nil
}

// clearBackoff records that the pods of the latest restart exist: the
// backoff's next attempt is behind it.
func clearBackoff(job *v1alpha1.TrainingJob) {
	if b := job.Status.RestartBackoff; b != nil {
		b.NextAttemptTime = nil
	}
}

// markCreated records that every object of the job exists.
func markCreated(job *v1alpha1.TrainingJob) {
	if !meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobCreated)) {
		setCondition(&job.Status, job.Generation, v1alpha1.JobCreated, metav1.ConditionTrue, ReasonPodsCreated, "the job's PodGroup, Service and pods were created")
	}
}

// deletePods deletes pods, recording the deletions as expected.
func (r *TrainingJobReconciler) deletePods(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod) error {
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	r.expectations.ExpectDeletions(job.UID, uids...)
	deleted, _, err := r.forEach(pods, func(p *corev1.Pod) error {
		err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil {
			r.expectations.DeletionFailed(job.UID, p.UID)
		}
		return client.IgnoreNotFound(err)
	})
	if deleted > 0 {
		ctrl.LoggerFrom(ctx).V(2).Info("Deleted pods", "count", deleted)
	}
	if err != nil {
		return fmt.Errorf("deleting pods of %s: %w", klog.KObj(job), err)
	}
	return nil
}

// ensureExcessDeleted deletes pods the spec no longer has.
func (r *TrainingJobReconciler) ensureExcessDeleted(ctx context.Context, job *v1alpha1.TrainingJob, excess []jobPod) error {
	if len(excess) == 0 {
		return nil
	}
	pods := make([]*corev1.Pod, len(excess))
	for i, p := range excess {
		pods[i] = p.Pod
	}
	return r.deletePods(ctx, job, pods)
}

// forEach runs write on every pod, CreateParallelism at a time, and counts
// the successes. AlreadyExists counts as neither success nor error: the pod
// is there, as wanted; it is counted in the second result.
func (r *TrainingJobReconciler) forEach(pods []*corev1.Pod, write func(*corev1.Pod) error) (int, int, error) {
	var (
		mu          sync.Mutex
		done, dup   int
		errs        []error
		wg          sync.WaitGroup
		parallelism = make(chan struct{}, r.CreateParallelism)
	)
	for _, p := range pods {
		parallelism <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-parallelism }()
			err := write(p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done++
			case apierrors.IsAlreadyExists(err):
				dup++
			case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
				// The namespace is going, and the job with it.
			default:
				errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
			}
		}()
	}
	wg.Wait()
	return done, dup, errors.Join(errs...)
}

// setSecondsAnnotation sets annotation on pod to seconds, a runPolicy field
// the scheduler reads off the job's pods, when it is set above 0.
func setSecondsAnnotation(pod *corev1.Pod, annotation string, seconds *int32) {
	if seconds == nil || *seconds <= 0 {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotation] = strconv.Itoa(int(*seconds))
}
