package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
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
// annotations up to date, writing only when they differ.
func (r *TrainingJobReconciler) ensurePodGroup(ctx context.Context, job *v1alpha1.TrainingJob) error {
	a, err := r.Registry.For(job.Spec.Framework)
	if err != nil {
		return err
	}
	want, err := desiredPodGroup(job, a, r.Topology)
	if err != nil {
		return fmt.Errorf("PodGroup of %s: %w", klog.KObj(job), err)
	}
	var have schedv1alpha1.PodGroup
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := controllerutil.SetControllerReference(job, want, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PodGroup %s: %w", klog.KObj(want), err)
		}
		r.Recorder.Eventf(job, corev1.EventTypeNormal, "CreatedPodGroup", "Created PodGroup %s (minMember %d)", want.Name, want.Spec.MinMember)
		return nil
	case err != nil:
		return fmt.Errorf("getting PodGroup %s: %w", klog.KObj(want), err)
	}
	annotationsWant, annotationsHave := topologyAnnotations(want.Annotations), topologyAnnotations(have.Annotations)
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) && maps.Equal(annotationsHave, annotationsWant) {
		return nil
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
		return fmt.Errorf("updating PodGroup %s: %w", klog.KObj(&have), err)
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, "UpdatedPodGroup", "Updated PodGroup %s (minMember %d)", have.Name, have.Spec.MinMember)
	return nil
}

// resetPodGroupStatus starts the PodGroup's phase over for a restarted
// gang: the PodGroup controller leaves a Failed group Failed for good.
func (r *TrainingJobReconciler) resetPodGroupStatus(ctx context.Context, job *v1alpha1.TrainingJob) error {
	pg := &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace}}
	patch := []byte(`{"status":{"phase":"Pending","running":null,"succeeded":null,"failed":null}}`)
	if err := r.Client.Status().Patch(ctx, pg, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("resetting the status of PodGroup %s: %w", klog.KObj(pg), err)
	}
	return nil
}

// desiredService is the job's headless Service. It selects the pods by the
// job-name label alone: a Service only selects pods of its own namespace,
// where the job's name is unique, and the reconciler sets the label on every
// pod it creates, overriding the template's.
func desiredService(job *v1alpha1.TrainingJob) *corev1.Service {
	return framework.NewHeadlessService(job, map[string]string{lockstep.LabelJobName: job.Name})
}

// ensureService creates the job's headless Service or brings the fields the
// controller owns up to date: the selector and publishNotReadyAddresses. A
// Service made by an older controller has no selector, hence no endpoints
// and no DNS names for the pods. The API server defaults the rest of the
// spec, so only those fields are compared and written; clusterIP None
// cannot change, and every controller version has set it.
func (r *TrainingJobReconciler) ensureService(ctx context.Context, job *v1alpha1.TrainingJob) error {
	want := desiredService(job)
	var have corev1.Service
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		return r.ensureObject(ctx, job, want, true)
	case err != nil:
		return fmt.Errorf("getting Service %s: %w", klog.KObj(want), err)
	}
	if maps.Equal(have.Spec.Selector, want.Spec.Selector) && have.Spec.PublishNotReadyAddresses == want.Spec.PublishNotReadyAddresses {
		return nil
	}
	if !metav1.IsControlledBy(&have, job) {
		return fmt.Errorf("headless Service %s exists and is not the job's", klog.KObj(&have))
	}
	have.Spec.Selector = want.Spec.Selector
	have.Spec.PublishNotReadyAddresses = want.Spec.PublishNotReadyAddresses
	if err := r.Client.Update(ctx, &have); err != nil {
		return fmt.Errorf("updating Service %s: %w", klog.KObj(&have), err)
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, "UpdatedService", "Updated Service %s to select the job's pods", have.Name)
	return nil
}

// ensureAuxObjects applies the adapter's auxiliary objects.
func (r *TrainingJobReconciler) ensureAuxObjects(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter) error {
	aux, err := a.AuxObjects(job)
	if err != nil {
		return fmt.Errorf("auxiliary objects of %s: %w", klog.KObj(job), err)
	}
	for _, o := range aux {
		if err := r.ensureObject(ctx, job, o.Object, o.CreateOnly); err != nil {
			return err
		}
	}
	return nil
}

// ensureObject creates obj, owned by the job and labelled with it, or
// updates it when its content hash changed, unless it is create-only.
//
// A create-only object (the MPI SSH key Secret) is never read: it is
// created, and an existing one is left as it is, so the controller needs
// no read access to its kind (RBAC grants it only create on Secrets). Which
// were created is remembered per job, so that not every reconcile tries.
func (r *TrainingJobReconciler) ensureObject(ctx context.Context, job *v1alpha1.TrainingJob, obj client.Object, createOnly bool) error {
	kind := fmt.Sprintf("%T", obj)
	hash, err := contentHash(obj)
	if err != nil {
		return fmt.Errorf("hashing %s %s: %w", kind, klog.KObj(obj), err)
	}
	create := func() error {
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[lockstep.LabelJobName] = job.Name
		obj.SetLabels(labels)
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[lockstep.AnnotationSpecHash] = hash
		obj.SetAnnotations(ann)
		if err := controllerutil.SetControllerReference(job, obj, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", kind, klog.KObj(obj), err)
		}
		return nil
	}
	if createOnly {
		key := createdKey{job: job.UID, kind: kind, name: obj.GetName()}
		if _, done := r.created.Load(key); done {
			return nil
		}
		if err := create(); err != nil {
			return err
		}
		r.created.Store(key, struct{}{})
		return nil
	}
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%s is not a client.Object", kind)
	}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	switch {
	case apierrors.IsNotFound(err):
		return create()
	case err != nil:
		return fmt.Errorf("getting %s %s: %w", kind, klog.KObj(obj), err)
	case existing.GetAnnotations()[lockstep.AnnotationSpecHash] == hash:
		return nil
	}
	if !metav1.IsControlledBy(existing, job) {
		return fmt.Errorf("%s %s exists and is not the job's", kind, klog.KObj(obj))
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	obj.SetOwnerReferences(existing.GetOwnerReferences())
	labels := existing.GetLabels()
	obj.SetLabels(labels)
	ann := existing.GetAnnotations()
	ann[lockstep.AnnotationSpecHash] = hash
	obj.SetAnnotations(ann)
	if err := r.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, klog.KObj(obj), err)
	}
	return nil
}

// createdKey names a create-only object made for a job.
type createdKey struct {
	job        types.UID
	kind, name string
}

// forgetCreated drops what was remembered of a job's create-only objects.
func (r *TrainingJobReconciler) forgetCreated(uid types.UID) {
	r.created.Range(func(k, _ any) bool {
		if k.(createdKey).job == uid {
			r.created.Delete(k)
		}
		return true
	})
}

// contentHash hashes an object as the adapter built it, metadata aside.
func contentHash(obj client.Object) (string, error) {
	c, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return "", errors.New("not a client.Object")
	}
	c.SetName("")
	c.SetNamespace("")
	c.SetLabels(nil)
	c.SetAnnotations(nil)
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

// desiredPod is pod index of role as the controller creates it: the
// adapter's template plus labels, owner, scheduler and restart policy. The
// restart policy is Never whatever the role's: the controller, not the
// kubelet, restarts failed pods, so that the failure policy decides what
// restarts with them and backoffLimit counts every restart.
func (r *TrainingJobReconciler) desiredPod(job *v1alpha1.TrainingJob, a framework.Adapter, role v1alpha1.ReplicaType, index int32) (*corev1.Pod, error) {
	tpl, err := a.PodTemplate(job, role, index)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
	pod.Name = framework.PodName(job.Name, role, index)
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
// at most CreateParallelism at a time. A name still held by a pod being
// deleted is left for a later pass.
func (r *TrainingJobReconciler) ensurePods(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter, obs observation) (wait time.Duration, err error) {
	var missing []*corev1.Pod
	taken := func(name string) bool { _, ok := obs.live[name]; return ok }
	for _, role := range a.Roles() {
		spec, ok := job.Spec.ReplicaSpecs[role]
		if !ok {
			continue
		}
		for i := range spec.DesiredReplicas() {
			if taken(framework.PodName(job.Name, role, i)) {
				continue
			}
			pod, err := r.desiredPod(job, a, role, i)
			if err != nil {
				return 0, fmt.Errorf("pod %s %d of %s: %w", role, i, klog.KObj(job), err)
			}
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

// truncateMessage keeps a condition message within the API's 32 KiB limit.
func truncateMessage(s string) string {
	const limit = 32 * 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit]
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

// ensurePlacement summarizes where the gang runs once every pod is bound.
func (r *TrainingJobReconciler) ensurePlacement(ctx context.Context, job *v1alpha1.TrainingJob, obs observation) (complete bool, err error) {
	placed := make([]placedPod, 0, len(obs.live))
	nodes := map[string]placementNode{}
	complete = true
	for _, p := range obs.live {
		if p.Spec.NodeName == "" {
			return false, nil
		}
		placed = append(placed, placedPod{Node: p.Spec.NodeName, GPUs: p.Annotations[lockstep.AnnotationGPUs]})
		if _, ok := nodes[p.Spec.NodeName]; ok {
			continue
		}
		var info placementNode
		var nt v1alpha1.NodeTopology
		switch err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &nt); {
		case err == nil:
			info.Topology = &nt.Spec
		case apierrors.IsNotFound(err):
			// Its agent has not published yet: summarize what is known and
			// come back for the efficiency.
			complete = false
		default:
			return false, fmt.Errorf("getting NodeTopology %s: %w", p.Spec.NodeName, err)
		}
		nodes[p.Spec.NodeName] = info
	}
	// Every node, from the cache: the reference placement of the rating is
	// the best the empty cluster allows.
	var all corev1.NodeList
	if err := r.Client.List(ctx, &all); err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	cluster, err := r.placements.get(r.Topology, all.Items)
	if err != nil {
		return false, err
	}
	// Recomputed on every pass (the cluster's tree and references are
	// cached); the status is only written when the summary changes.
	pl, err := summarizePlacement(placed, nodes, cluster)
	if pl != nil {
		job.Status.Placement = pl
	}
	return complete, err
}
