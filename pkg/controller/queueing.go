package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/controller/kueue"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Kueue integration. A TrainingJob labelled kueue.x-k8s.io/queue-name is
// queued in that LocalQueue: the controller makes and owns a Workload for it
// and runs the job only while Kueue admits the Workload. The protocol's
// decisions are pure (pkg/controller/kueue.Decide); this file reads its
// inputs and carries its decisions out.
//
// The Workload API is optional: the controller starts without it and
// watches Workloads once discovery serves them (queueAPI), so installing
// Kueue later needs no restart. Until then a queued job is held with a
// message saying so.
//
// RBAC (deploy/default/controller.yaml): Workloads get, list, watch,
// create, update (Kueue's finalizer), delete (stale ones); workloads/status
// update; ResourceFlavors get. PriorityClasses are read from the cache
// (priorityclass.go).

// queueAPI tracks whether the Workload API is served and, once it is,
// watches Workloads for the TrainingJob controller.
type queueAPI struct {
	served atomic.Bool
}

// queueAPIPoll is how often discovery is asked for the Workload API until
// it appears, and how soon a job held for its absence is looked at again.
const queueAPIPoll = 5 * time.Second

// queueName is the LocalQueue a job is queued in, or "".
func queueName(job *v1alpha1.TrainingJob) string { return job.Labels[lockstep.LabelKueueQueueName] }

// watchQueueAPI waits for the Workload API, then watches the Workloads
// TrainingJobs control. A Runnable of the manager.
func (r *TrainingJobReconciler) watchQueueAPI(mgr manager.Manager, c controller.Controller) manager.RunnableFunc {
	return watchWhenServed(mgr, c, optionalAPI{
		gv: kueue.GroupVersion, resource: kueue.WorkloadResource, object: kueue.NewWorkloadObject(),
		served: &r.queue.served, poll: queueAPIPoll,
		announce: "Kueue's Workload API is served: TrainingJobs labelled " + lockstep.LabelKueueQueueName + " are queued in Kueue",
	})
}

// optionalAPI is a kind the controller owns objects of but runs without:
// its CRD may be installed after the controller started.
type optionalAPI struct {
	gv       schema.GroupVersion
	resource string
	// object is an empty object of the kind, for the watch.
	object client.Object
	// served is set once the kind is watched.
	served   *atomic.Bool
	poll     time.Duration
	announce string
}

// watchWhenServed waits until discovery serves api, then watches its
// objects for the jobs that control them and sets api.served. A Runnable
// of the manager: a watch started on a kind the apiserver does not serve
// would fail the manager, so it is started only once it is.
func watchWhenServed(mgr manager.Manager, c controller.Controller, api optionalAPI) manager.RunnableFunc {
	return func(ctx context.Context) error {
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("discovery client: %w", err)
		}
		for !served(dc, api.gv, api.resource) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(api.poll):
			}
		}
		if err := c.Watch(source.Kind[client.Object](mgr.GetCache(), api.object,
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.TrainingJob{}, handler.OnlyControllerOwner()))); err != nil {
			return fmt.Errorf("watching %s %s: %w", api.gv, api.resource, err)
		}
		api.served.Store(true)
		klog.FromContext(ctx).Info(api.announce)
		<-ctx.Done()
		return nil
	}
}

// served reports whether discovery lists resource in gv.
func served(dc discovery.DiscoveryInterface, gv schema.GroupVersion, resource string) bool {
	list, err := dc.ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
}

// reader reads what the cache should not hold (ResourceFlavors: one get
// each when a job is started).
func (r *TrainingJobReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// ensureQueued runs the protocol for a queued job and returns its decision.
// The Workload writes are done; holding or running the job is the caller's.
func (r *TrainingJobReconciler) ensureQueued(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod) (kueue.Decision, error) {
	d, _, err := r.runProtocol(ctx, job, pods)
	return d, err
}

// runProtocol is ensureQueued, also saying why Kueue refused a resize ("" when
// it did not).
func (r *TrainingJobReconciler) runProtocol(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod) (kueue.Decision, string, error) {
	if !r.queue.served.Load() {
		return kueue.Decision{HeldReason: kueue.HeldWaitingForAdmission, HeldMessage: fmt.Sprintf(
			"label %s=%s queues the job in Kueue, but Kueue's Workload API (%s) is not served: install Kueue, or remove the label",
			lockstep.LabelKueueQueueName, queueName(job), kueue.GroupVersion)}, "", nil
	}
	var prio *kueue.Priority
	if sp := job.Spec.RunPolicy.SchedulingPolicy; sp != nil && sp.PriorityClass != "" {
		pc := &schedulingv1.PriorityClass{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: sp.PriorityClass}, pc); err != nil {
			return kueue.Decision{}, "", fmt.Errorf("spec.runPolicy.schedulingPolicy.priorityClass %q: %w", sp.PriorityClass, err)
		}
		prio = &kueue.Priority{ClassName: pc.Name, Value: pc.Value}
	}
	want, err := kueue.WantedWorkload(job, queueName(job), prio)
	if err != nil {
		return kueue.Decision{}, "", err
	}
	objs, mirrors, err := r.jobWorkloads(ctx, job.Namespace, job.Name, job.UID)
	if err != nil {
		return kueue.Decision{}, "", err
	}
	in := kueue.Job{SpecHash: want.Annotations[lockstep.AnnotationSpecHash], Active: len(pods) > 0}
	if kueue.Elastic(job) {
		in.Elastic, in.Counts = true, want.Counts()
	}
	if isFinished(&job.Status) {
		in.Finished = true
		in.Succeeded = meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobSucceeded))
		for _, t := range []v1alpha1.JobState{v1alpha1.JobSucceeded, v1alpha1.JobFailed} {
			if c := meta.FindStatusCondition(job.Status.Conditions, string(t)); c != nil && c.Status == metav1.ConditionTrue {
				in.Message = c.Message
			}
		}
	}
	d := kueue.Decide(in, mirrors)
	refused, err := r.carryOut(ctx, job, want, objs, d)
	return d, refused, err
}

// jobWorkloads lists the Workloads a TrainingJob named name controls: the
// one of UID uid, or any one when uid is "" (the job is gone).
func (r *TrainingJobReconciler) jobWorkloads(ctx context.Context, namespace, name string, uid types.UID) (map[string]*unstructured.Unstructured, []*kueue.Workload, error) {
	list := kueue.NewWorkloadList()
	if err := r.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{lockstep.LabelJobName: name}); err != nil {
		return nil, nil, fmt.Errorf("listing the Workloads of TrainingJob %s/%s: %w", namespace, name, err)
	}
	objs := map[string]*unstructured.Unstructured{}
	var mirrors []*kueue.Workload
	for i := range list.Items {
		u := &list.Items[i]
		ref := metav1.GetControllerOf(u)
		if ref == nil || ref.Kind != "TrainingJob" || (uid != "" && ref.UID != uid) {
			continue
		}
		w, err := kueue.FromUnstructured(u)
		if err != nil {
			return nil, nil, err
		}
		objs[u.GetName()] = u
		mirrors = append(mirrors, w)
	}
	kueue.SortOldestFirst(mirrors)
	return objs, mirrors, nil
}

// carryOut does the Workload writes of decision d. refused says why Kueue
// refused a resize ("" when it did not).
func (r *TrainingJobReconciler) carryOut(ctx context.Context, job *v1alpha1.TrainingJob, want *kueue.Workload, objs map[string]*unstructured.Unstructured, d kueue.Decision) (refused string, err error) {
	logger := ctrl.LoggerFrom(ctx)
	if d.Create {
		if kueue.Elastic(job) {
			slice := want.Name
			if d.ReplaceSlice != "" {
				want.Annotations[lockstep.AnnotationKueueSliceReplacementFor] = job.Namespace + "/" + d.ReplaceSlice
				slice = d.SliceName
			}
			want.Annotations[lockstep.AnnotationKueueSliceName] = slice
		}
		u, err := kueue.ToUnstructured(want)
		if err != nil {
			return "", err
		}
		if err := r.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating Workload %s for TrainingJob %s: %w", want.Name, klog.KObj(job), err)
		}
		if d.ReplaceSlice != "" {
			logger.V(2).Info("Created a Workload slice for a scale-up", "workload", want.Name, "replaces", d.ReplaceSlice, "counts", want.Counts())
			r.Recorder.Eventf(job, corev1.EventTypeNormal, "CreatedWorkloadSlice",
				"Created Workload %s for %v pods, replacing admitted Workload %s once Kueue admits it; the running pods keep running", want.Name, want.Counts(), d.ReplaceSlice)
		} else {
			logger.V(2).Info("Created Workload", "workload", want.Name, "queue", want.Spec.QueueName)
			r.Recorder.Eventf(job, corev1.EventTypeNormal, "CreatedWorkload", "Created Workload %s in queue %s", want.Name, want.Spec.QueueName)
		}
	}
	if rs := d.Resize; rs != nil {
		if err := r.resizeWorkload(ctx, objs[rs.Name], rs.Counts); err != nil {
			if errors.Is(err, errStaleJob) || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				return "", fmt.Errorf("resizing Workload %s of TrainingJob %s to %v: %w", rs.Name, klog.KObj(job), rs.Counts, err)
			}
			// Kueue's webhook refuses it without the
			// ElasticJobsViaWorkloadSlices gate. Not an error of the job's:
			// it runs on (a scale-down's extra pods go, their quota stays
			// reserved) and says why.
			refused = fmt.Sprintf("Kueue refused to resize Workload %s to %v (is Kueue's ElasticJobsViaWorkloadSlices feature gate on?): %v", rs.Name, rs.Counts, err)
			logger.V(2).Info("Kueue refused to resize a Workload", "workload", rs.Name, "counts", rs.Counts, "err", err)
		} else {
			logger.V(2).Info("Resized Workload", "workload", rs.Name, "counts", rs.Counts)
			r.Recorder.Eventf(job, corev1.EventTypeNormal, "ResizedWorkload", "Set the pod counts of Workload %s to %v", rs.Name, rs.Counts)
		}
	}
	for _, name := range d.Delete {
		if err := r.Client.Delete(ctx, objs[name]); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting stale Workload %s of TrainingJob %s: %w", name, klog.KObj(job), err)
		}
		logger.V(2).Info("Deleted stale Workload", "workload", name)
	}
	now := metav1.NewTime(r.Clock.Now())
	if d.Finish != nil {
		if err := r.writeWorkloadStatus(ctx, objs[d.FinishWorkload], func(w *kueue.Workload, u *unstructured.Unstructured) {
			c := *d.Finish
			c.LastTransitionTime, c.ObservedGeneration = now, w.Generation
			meta.SetStatusCondition(&w.Status.Conditions, c)
		}); err != nil {
			return "", fmt.Errorf("finishing Workload %s: %w", d.FinishWorkload, err)
		}
		logger.V(2).Info("Finished Workload", "workload", d.FinishWorkload, "reason", d.Finish.Reason)
	}
	if cl := d.ClearReservation; cl != nil {
		if err := r.writeWorkloadStatus(ctx, objs[cl.Name], func(w *kueue.Workload, u *unstructured.Unstructured) {
			for _, c := range []metav1.Condition{cl.Requeued, cl.Reserved, cl.Admitted} {
				c.LastTransitionTime, c.ObservedGeneration = now, w.Generation
				meta.SetStatusCondition(&w.Status.Conditions, c)
			}
			unstructured.RemoveNestedField(u.Object, "status", "admission")
		}); err != nil {
			return "", fmt.Errorf("clearing the quota reservation of Workload %s: %w", cl.Name, err)
		}
		logger.V(2).Info("Cleared the quota reservation of an evicted Workload", "workload", cl.Name)
	}
	for _, name := range d.RemoveFinalizer {
		if err := r.removeWorkloadFinalizer(ctx, objs[name]); err != nil {
			return "", err
		}
	}
	return refused, nil
}

// writeWorkloadStatus changes the conditions (and whatever else edit does
// to u) of a Workload's status, under optimistic concurrency: Kueue writes
// the same status, and a conflict means deciding again on its new one.
func (r *TrainingJobReconciler) writeWorkloadStatus(ctx context.Context, u *unstructured.Unstructured, edit func(*kueue.Workload, *unstructured.Unstructured)) error {
	u = u.DeepCopy()
	w, err := kueue.FromUnstructured(u)
	if err != nil {
		return err
	}
	edit(w, u)
	if err := kueue.SetConditions(u, w.Status.Conditions); err != nil {
		return err
	}
	if err := r.Client.Status().Update(ctx, u); err != nil {
		if apierrors.IsConflict(err) {
			return errStaleJob
		}
		return err
	}
	return nil
}

// resizeWorkload sets the pod counts of u's pod sets. Kueue's webhook
// admits a lower count on an admitted slice only with its
// ElasticJobsViaWorkloadSlices feature gate on: its refusal is returned
// as it is, naming the field.
func (r *TrainingJobReconciler) resizeWorkload(ctx context.Context, u *unstructured.Unstructured, counts map[string]int32) error {
	u = u.DeepCopy()
	sets, _, err := unstructured.NestedSlice(u.Object, "spec", "podSets")
	if err != nil {
		return err
	}
	for i, s := range sets {
		ps, ok := s.(map[string]any)
		if !ok {
			continue
		}
		name, _ := ps["name"].(string)
		if n, ok := counts[name]; ok {
			ps["count"] = int64(n)
			sets[i] = ps
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, sets, "spec", "podSets"); err != nil {
		return err
	}
	if err := r.Client.Update(ctx, u); err != nil {
		if apierrors.IsConflict(err) {
			return errStaleJob
		}
		return err
	}
	return nil
}

// removeWorkloadFinalizer takes Kueue's resource-in-use finalizer off u.
func (r *TrainingJobReconciler) removeWorkloadFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	u = u.DeepCopy()
	fs := slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == kueue.FinalizerResourceInUse })
	u.SetFinalizers(fs)
	if err := r.Client.Update(ctx, u); err != nil {
		if apierrors.IsConflict(err) {
			return errStaleJob
		}
		return client.IgnoreNotFound(err)
	}
	return nil
}

// releaseWorkloads takes Kueue's finalizer off the deleted Workloads of a
// job that is gone (or going), so the garbage collector can remove them
// and Kueue frees their quota.
func (r *TrainingJobReconciler) releaseWorkloads(ctx context.Context, namespace, name string) error {
	if !r.queue.served.Load() {
		return nil
	}
	objs, mirrors, err := r.jobWorkloads(ctx, namespace, name, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range mirrors {
		if w.DeletionTimestamp != nil && w.HasFinalizer() {
			errs = append(errs, r.removeWorkloadFinalizer(ctx, objs[w.Name]))
		}
	}
	return errors.Join(errs...)
}

// applyAdmission gives each admitted role's template the node labels and
// tolerations of the ResourceFlavors Kueue assigned it, as Kueue's job
// integrations do. It changes the in-memory job only (the pods made from
// it), and reads flavors only while pods are still to be created.
func (r *TrainingJobReconciler) applyAdmission(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod, assignments []kueue.PodSetAssignment) error {
	if int32(len(pods)) >= job.Spec.TotalReplicas() {
		return nil
	}
	flavors := map[string]*unstructured.Unstructured{}
	for role, rs := range job.Spec.ReplicaSpecs {
		i := slices.IndexFunc(assignments, func(a kueue.PodSetAssignment) bool { return a.Name == kueue.PodSetName(role) })
		if i < 0 {
			continue
		}
		for _, name := range assignments[i].Flavors {
			f, ok := flavors[name]
			if !ok {
				f = &unstructured.Unstructured{}
				f.SetGroupVersionKind(kueue.ResourceFlavorGVK)
				if err := r.reader().Get(ctx, client.ObjectKey{Name: name}, f); err != nil {
					return fmt.Errorf("getting ResourceFlavor %s assigned to %s of TrainingJob %s: %w", name, role, klog.KObj(job), err)
				}
				flavors[name] = f
			}
			labels, _, _ := unstructured.NestedStringMap(f.Object, "spec", "nodeLabels")
			spec := &rs.Template.Spec
			for k, v := range labels {
				if spec.NodeSelector == nil {
					spec.NodeSelector = map[string]string{}
				}
				spec.NodeSelector[k] = v
			}
			tols, _, _ := unstructured.NestedSlice(f.Object, "spec", "tolerations")
			for _, t := range tols {
				m, _ := t.(map[string]any)
				var tol corev1.Toleration
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &tol); err == nil && !slices.Contains(spec.Tolerations, tol) {
					spec.Tolerations = append(spec.Tolerations, tol)
				}
			}
		}
		job.Spec.ReplicaSpecs[role] = rs
	}
	return nil
}

// ensureAdmitted runs a queued job while Kueue admits its Workload and
// holds it (no pods, Suspended=True with Kueue's reason) otherwise. An
// eviction deletes the pods whole, like a suspend: no restart is counted.
func (r *TrainingJobReconciler) ensureAdmitted(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter, pods []*corev1.Pod) (ctrl.Result, error) {
	d, refused, err := r.runProtocol(ctx, job, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !d.Run {
		res, err := r.ensureSuspended(ctx, job, pods, d.HeldReason, d.HeldMessage)
		if !r.queue.served.Load() && (res.RequeueAfter == 0 || queueAPIPoll < res.RequeueAfter) {
			res.RequeueAfter = queueAPIPoll
		}
		return res, err
	}
	limitToAdmitted(job, d.Allowed)
	r.ensureResizingCondition(job, d.ResizePending, refused)
	if err := r.applyAdmission(ctx, job, pods, d.Assignments); err != nil {
		return ctrl.Result{}, err
	}
	return r.ensureRunning(ctx, job, a, pods)
}

// Reasons of the Resizing condition.
const (
	ReasonWaitingForQuota = "WaitingForQuota"
	ReasonResized         = "Resized"
	ReasonResizeRefused   = "ResizeRefused"
)

// limitToAdmitted lowers each role's replicas in the in-memory job (the
// pods made from it, never the stored spec) to what Kueue admitted of it:
// an elastic job scaled up runs at its admitted size until Kueue admits
// the larger one, and pods already running are not touched.
func limitToAdmitted(job *v1alpha1.TrainingJob, allowed map[string]int32) {
	for role, rs := range job.Spec.ReplicaSpecs {
		n, ok := allowed[kueue.PodSetName(role)]
		if !ok || n >= rs.DesiredReplicas() {
			continue
		}
		rs.Replicas = &n
		job.Spec.ReplicaSpecs[role] = rs
	}
}

// ensureResizingCondition says on the job which pods wait for Kueue to
// admit a larger size (pending, "" when none do) or why Kueue refused a
// smaller one (refused), and when neither holds any more.
func (r *TrainingJobReconciler) ensureResizingCondition(job *v1alpha1.TrainingJob, pending, refused string) {
	old := meta.FindStatusCondition(job.Status.Conditions, v1alpha1.ConditionResizing)
	switch {
	case refused != "":
		if old == nil || old.Status != metav1.ConditionTrue || old.Message != refused {
			r.Recorder.Event(job, corev1.EventTypeWarning, ReasonResizeRefused, refused)
		}
		meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionResizing, Status: metav1.ConditionTrue,
			Reason: ReasonResizeRefused, Message: refused, ObservedGeneration: job.Generation})
	case pending != "":
		if old == nil || old.Status != metav1.ConditionTrue || old.Message != pending {
			r.Recorder.Event(job, corev1.EventTypeNormal, ReasonWaitingForQuota, pending)
		}
		meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionResizing, Status: metav1.ConditionTrue,
			Reason: ReasonWaitingForQuota, Message: pending, ObservedGeneration: job.Generation})
	case old != nil && old.Status == metav1.ConditionTrue:
		msg := fmt.Sprintf("Kueue admitted the job's size (%d pods)", job.Spec.TotalReplicas())
		r.Recorder.Event(job, corev1.EventTypeNormal, ReasonResized, msg)
		meta.SetStatusCondition(&job.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionResizing, Status: metav1.ConditionFalse,
			Reason: ReasonResized, Message: msg, ObservedGeneration: job.Generation})
	}
}
