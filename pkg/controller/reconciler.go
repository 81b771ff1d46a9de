package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ControllerName names the controller in events. Its metrics carry
// controller="trainingjob", the name controller-runtime derives from the
// kind it reconciles.
const ControllerName = "lockstep-controller"

// DefaultClusterDomain is the kubelet's default cluster DNS domain.
const DefaultClusterDomain = "cluster.local"

// TrainingJobReconciler runs TrainingJobs: it keeps each job's PodGroup,
// headless Service, auxiliary objects and pods as the job's framework
// adapter describes them, restarts pods under the failure policy, enforces
// the run policy and reports the job's status.
//
// Reconcile contract: Reconcile reads the job and its pods from the cache
// and is idempotent; it writes an object only when it differs from what
// the job wants, and the job's status only when it changed. Timed work
// (activeDeadlineSeconds, ttlSecondsAfterFinished) is requeued with
// RequeueAfter; nothing polls. A job whose spec is invalid gets a Failed
// condition (InvalidSpec) and a reconcile.TerminalError, so it is neither
// retried nor deleted. Writes to pods are guarded by expectations (see
// expectations) so that a cache lagging behind the controller's own writes
// never yields duplicate pods or a restart counted twice.
//
// +kubebuilder:rbac:groups=lockstep.dev,resources=trainingjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=lockstep.dev,resources=trainingjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=lockstep.dev,resources=nodetopologies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services;configmaps;secrets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
type TrainingJobReconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Registry *framework.Registry
	Clock    clock.PassiveClock
	// SchedulerName is the scheduler the job's pods ask for.
	SchedulerName string
	// ClusterDomain is the cluster's DNS domain, for the pods' search list.
	ClusterDomain string
	// Workers is how many jobs are reconciled in parallel; CreateParallelism
	// how many pod writes one job issues at once.
	Workers           int
	CreateParallelism int
	// Topology is the cluster's topology configuration (levels and
	// oversubscription), which status.placement is rated against; the
	// scheduler's, loaded with pkg/lockstep/topologyconfig. Default:
	// lockstep.DefaultTopologyConfig().
	Topology lockstep.TopologyConfig
	// APIReader reads objects the cache should not hold (the ResourceFlavors
	// of Kueue-queued jobs); the client when nil.
	APIReader client.Reader

	// queue: whether Kueue's Workload API is served (queueing.go).
	queue queueAPI
	// computeDomains: whether NVIDIA's ComputeDomain API is served
	// (computedomain.go).
	computeDomains computeDomainAPI
	expectations   *expectations
	// placements caches the cluster's domain tree and placement Rater.
	placements placementCache
	// capacity is the GPUs the cluster's nodes can allocate.
	capacity gpuCapacity
	// created holds the createdKeys of create-only objects made.
	created sync.Map
	// failedCreates are the pods whose creation failed in their job's
	// current incarnation.
	failedCreates failedCreates
	// rearms counts the PodGroup re-arms of each incarnation (podgroup.go).
	rearms rearms
	// vanished are the preempted members the pod events showed
	// (preemption.go).
	vanished vanishedPods
	// checkpointWarnings are the bad checkpoint reports warned about, and
	// heardReports the reporting pods the pod events showed
	// (checkpoint.go).
	checkpointWarnings checkpointWarnings
	heardReports       heardReports
}

// SetupWithManager registers the reconciler, watching jobs, their pods and
// the spec of their PodGroups.
func (r *TrainingJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.ClusterDomain == "" {
		r.ClusterDomain = DefaultClusterDomain
	}
	if r.SchedulerName == "" {
		r.SchedulerName = lockstep.SchedulerName
	}
	if r.CreateParallelism < 1 {
		r.CreateParallelism = 64
	}
	if len(r.Topology.Levels) == 0 {
		r.Topology = lockstep.DefaultTopologyConfig()
	}
	r.expectations = newExpectations(r.Clock)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.TrainingJob{}).
		// Owns, noting the preempted pods as they go (preemption.go).
		Watches(&corev1.Pod{}, podEvents{
			EventHandler: handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.TrainingJob{}, handler.OnlyControllerOwner()),
			vanished:     &r.vanished,
			reports:      &r.heardReports,
		}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The PodGroup controller rewrites status as pods change; only a
		// changed or deleted spec concerns this one, and a move into a
		// phase upstream never leaves (podGroupNeedsRearm).
		Owns(&schedv1alpha1.PodGroup{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, podGroupEndedPredicate))).
		// The GPU claim templates the pods claim from, made again when
		// deleted (gpuclaims.go).
		Owns(&resourcev1.ResourceClaimTemplate{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers})
	// The users' claim templates that jobs wait for (gpuclaims.go).
	b, err := r.watchClaimTemplates(mgr, b)
	if err != nil {
		return err
	}
	// Nodes that go dark under a job (nodeloss.go).
	b, err = r.watchNodes(mgr, b)
	if err != nil {
		return err
	}
	// The inputs of the placement summary (placement.go): the node set,
	// without waking any job, and the NodeTopologies of the jobs' nodes.
	if err := r.watchNodeSet(context.Background(), mgr.GetCache()); err != nil {
		return err
	}
	b = r.watchNodeTopologies(b)
	// The claims whose devices the summary lists (placement.go).
	b = r.watchClaims(b)
	// PriorityClasses that jobs wait for (priorityclass.go).
	if b, err = r.watchPriorityClasses(mgr, b); err != nil {
		return err
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	// Kueue's Workloads and NVIDIA's ComputeDomains are watched once their
	// APIs are served.
	if err := mgr.Add(r.watchQueueAPI(mgr, c)); err != nil {
		return err
	}
	return mgr.Add(r.watchComputeDomainAPI(mgr, c))
}

// Reconcile brings one job a step closer to its spec.
func (r *TrainingJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	job := &v1alpha1.TrainingJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.releaseWorkloads(ctx, req.Namespace, req.Name)
		}
		return ctrl.Result{}, fmt.Errorf("getting TrainingJob %s: %w", req, err)
	}
	if job.DeletionTimestamp != nil {
		r.expectations.Forget(job.UID)
		r.forgetCreated(job.UID)
		r.failedCreates.forget(job.UID)
		r.vanished.forget(job.UID)
		r.rearms.forget(job.UID)
		r.checkpointWarnings.forget(job.UID)
		r.heardReports.forget(job.UID)
		return ctrl.Result{}, r.releaseWorkloads(ctx, req.Namespace, req.Name)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("job", klog.KObj(job)))
	original := job.Status.DeepCopy()
	job.Default()
	adapter, err := r.validate(job)
	if err != nil {
		return ctrl.Result{}, r.rejectInvalid(ctx, job, original, err)
	}
	pods, err := r.listPods(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before any decision: a restart decided below hands the checkpoint its
	// failing ranks reported on their way out to the next incarnation.
	r.foldCheckpoints(ctx, job, pods, framework.EffectiveRestartScope(adapter, job))
	// Pods being deleted on a node that stopped answering never go on their
	// own, whatever the job's state: force-deleted once the proof holds
	// (nodeloss.go).
	releaseAfter, err := r.releaseUnreachable(ctx, job, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if releaseAfter > 0 && err == nil && (res.RequeueAfter == 0 || releaseAfter < res.RequeueAfter) {
			res.RequeueAfter = releaseAfter
		}
	}()

	// A job whose PriorityClass is missing gets no pods (priorityclass.go).
	held := false
	if !isFinished(&job.Status) && !job.Spec.IsSuspended() && len(pods) == 0 {
		held, err = r.ensurePriorityClass(ctx, job)
	}
	switch {
	case err != nil || held:
	case isFinished(&job.Status):
		if queueName(job) != "" {
			_, err = r.ensureQueued(ctx, job, pods)
		}
		if err == nil {
			res, err = r.ensureFinished(ctx, job, pods)
		}
	case job.Spec.IsSuspended():
		res, err = r.ensureSuspended(ctx, job, pods, ReasonSuspended, "the job is suspended: its pods are deleted")
	case queueName(job) != "":
		res, err = r.ensureAdmitted(ctx, job, adapter, pods)
	default:
		res, err = r.ensureRunning(ctx, job, adapter, pods)
	}
	if statusErr := r.updateStatus(ctx, job, original); statusErr != nil && err == nil {
		err = statusErr
	}
	if errors.Is(err, errStaleJob) {
		// A newer job is usually on its way through the cache, but not
		// always in time (a watch that dropped, a proxy's 409): look again
		// soon rather than wait for an event that may not come. Not an
		// error, which would be logged as one.
		if res.RequeueAfter == 0 || res.RequeueAfter > staleJobRetry {
			res.RequeueAfter = staleJobRetry
		}
		return res, nil
	}
	return res, err
}

// errStaleJob says a write of the job's status conflicted: it was decided
// on a stale copy.
var errStaleJob = errors.New("the TrainingJob changed since it was read")

// staleJobRetry is how soon a job whose status write conflicted is
// reconciled again.
const staleJobRetry = time.Second

// validate checks the defaulted job as the API server would have, and finds
// its adapter.
func (r *TrainingJobReconciler) validate(job *v1alpha1.TrainingJob) (framework.Adapter, error) {
	errs := job.Validate()
	// Also refused by the template policy at admission, where installed:
	// without it the job fails here rather than lose its fence.
	errs = append(errs, job.ValidateReservedEnv()...)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return r.Registry.For(job.Spec.Framework)
}

// rejectInvalid fails a job whose spec cannot run. The job is kept, for its
// owner to read why.
func (r *TrainingJobReconciler) rejectInvalid(ctx context.Context, job *v1alpha1.TrainingJob, original *v1alpha1.TrainingJobStatus, invalid error) error {
	if !meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobFailed)) {
		r.Recorder.Eventf(job, corev1.EventTypeWarning, ReasonInvalidSpec, "Invalid spec: %v", invalid)
		ctrl.LoggerFrom(ctx).V(2).Info("Rejected invalid job", "err", invalid)
	}
	setCondition(&job.Status, job.Generation, v1alpha1.JobFailed, metav1.ConditionTrue, ReasonInvalidSpec, invalid.Error())
	if job.Status.CompletionTime == nil {
		now := metav1.NewTime(r.Clock.Now())
		job.Status.CompletionTime = &now
	}
	if err := r.updateStatus(ctx, job, original); err != nil {
		return err
	}
	return reconcile.TerminalError(fmt.Errorf("invalid TrainingJob %s: %w", klog.KObj(job), invalid))
}

// ensureRunning runs an active job: its objects, then the decision on its
// pods, then the pods the decision leaves missing.
func (r *TrainingJobReconciler) ensureRunning(ctx context.Context, job *v1alpha1.TrainingJob, a framework.Adapter, pods []*corev1.Pod) (res ctrl.Result, err error) {
	pg, err := r.ensurePodGroup(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureService(ctx, job); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.clearSuspendNotices(ctx, pods); err != nil {
		return ctrl.Result{}, err
	}
	// The ranks' right to report checkpoints is not worth holding the job
	// for: it runs without, said on the job and retried.
	if reporterErr := r.ensureCheckpointReporter(ctx, job, a); reporterErr != nil {
		r.Recorder.Eventf(job, corev1.EventTypeWarning, ReasonCheckpointReporterFailed,
			"The job's pods cannot report checkpoints for now: %v", reporterErr)
		defer func() {
			if err == nil && (res.RequeueAfter == 0 || res.RequeueAfter > checkpointReporterRetry) {
				res.RequeueAfter = checkpointReporterRetry
			}
		}()
	}
	if err := r.ensureAuxObjects(ctx, job, a); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureAutoscaler(ctx, job); err != nil {
		return ctrl.Result{}, err
	}
	// What the pods' GPU claims ask for, which the ComputeDomain, the pods
	// and the placement summary depend on.
	claims, err := r.readClaimGPUs(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before any pod: the pods claim its channel (computedomain.go).
	cdHeld, err := r.ensureComputeDomain(ctx, job, claims, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before any pod: the pods claim GPUs from them (gpuclaims.go).
	copies, claimsHeld, err := r.ensureGPUClaimTemplates(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobSuspended)) {
		setCondition(&job.Status, job.Generation, v1alpha1.JobSuspended, metav1.ConditionFalse, ReasonResumed, "the job was resumed")
		r.Recorder.Event(job, corev1.EventTypeNormal, ReasonResumed, "Resumed: recreating the pods")
	}
	obs := observe(job, pods, framework.EffectiveRestartScope(a, job))
	obs.noteVanished(job, r.vanished.of(job))
	obs.excuse(r.failedCreates.neverCreated(job))
	r.recordReplicas(job, obs)
	if !r.expectations.Satisfied(job.UID, pods) {
		// The cache has not caught up with our writes: decide on the next
		// event, or when the expectations expire.
		return ctrl.Result{RequeueAfter: expectationsTTL}, nil
	}
	// Members on nodes that went dark, and pods of an earlier incarnation
	// left there (nodeloss.go).
	loss, err := r.observeNodeLoss(ctx, job, &obs, pods, framework.EffectiveRestartScope(a, job))
	if err != nil {
		return ctrl.Result{}, err
	}
	d := loss.amend(decide(job, a, obs, r.Clock.Now()))
	switch {
	case d.outcome.Result != framework.Running:
		return r.ensureFinishedNow(ctx, job, d.outcome)
	case d.waitStale:
		return ctrl.Result{}, r.ensureStaleDeleted(ctx, job, d.removeStale)
	case d.incident != "":
		return ctrl.Result{}, r.ensureRestart(ctx, job, d)
	}
	// The pods claim from the copies: what they ask for is what the
	// originals do.
	claims = claims.withCopies(copies)
	if cdHeld || claimsHeld {
		// The pods that run go on; the missing ones wait for the domain
		// or the claim templates.
		r.ensureRunningConditions(ctx, job, obs, claims)
		// A claim template or claim the pods wait for wakes the job when
		// it is created (watchClaimTemplates); the ComputeDomain's own
		// holds (the API not served, a foreign domain in the way) are
		// looked at again.
		if cdHeld && len(claims.missing) == 0 {
			return ctrl.Result{RequeueAfter: computeDomainRetry}, nil
		}
		return ctrl.Result{}, nil
	}
	wait, err := r.ensurePods(ctx, job, a, obs, copies, claims)
	if wait > 0 {
		// Pods of a restart wait out their backoff; so does the rest of
		// this pass, which concerns a gang that is not there yet.
		if d.requeueAfter > 0 && d.requeueAfter < wait {
			wait = d.requeueAfter
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err == nil {
		err = r.ensureExcessDeleted(ctx, job, obs.excess)
	}
	if err == nil && podGroupNeedsRearm(pg, minMember(job), obs) {
		if r.rearms.take(job) {
			ctrl.LoggerFrom(ctx).V(2).Info("Re-arming the PodGroup left ended under a live gang", "phase", pg.Phase)
			err = r.resetPodGroupStatus(ctx, job)
		} else {
			ctrl.LoggerFrom(ctx).V(2).Info("PodGroup ended under a live gang again; left as it is", "phase", pg.Phase, "rearms", maxRearms)
		}
	}
	// Also when a pod could not be created: a gang that started without
	// it (minAvailable below the replica count) runs and says so, while
	// the failed create is retried with the workqueue's backoff.
	r.ensureScheduledCondition(ctx, job, obs)
	r.ensureRunningConditions(ctx, job, obs, claims)
	requeue := d.requeueAfter
	if retry := loss.requeueAfter; retry > 0 && (requeue == 0 || retry < requeue) {
		requeue = retry
	}
	return ctrl.Result{RequeueAfter: requeue}, err
}

// ensureRunningConditions marks the job Running once its gang runs, which
// also ends a restart, and summarizes its placement.
func (r *TrainingJobReconciler) ensureRunningConditions(ctx context.Context, job *v1alpha1.TrainingJob, obs observation, claims claimGPUs) {
	if obs.running < minMember(job) {
		return
	}
	if !meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobRunning)) {
		setCondition(&job.Status, job.Generation, v1alpha1.JobRunning, metav1.ConditionTrue, ReasonGangRunning,
			fmt.Sprintf("%d pods are running", obs.running))
		r.Recorder.Eventf(job, corev1.EventTypeNormal, ReasonGangRunning, "The gang is running (%d pods)", obs.running)
	}
	if c := meta.FindStatusCondition(job.Status.Conditions, string(v1alpha1.JobRestarting)); c != nil && c.Status == metav1.ConditionTrue {
		// The message keeps why the job restarted.
		setCondition(&job.Status, job.Generation, v1alpha1.JobRestarting, metav1.ConditionFalse, ReasonGangRunning,
			truncateMessage(fmt.Sprintf("the restarted gang is running (%s: %s)", c.Reason, c.Message)))
	}
	ensurePreemptedCleared(job)
	// The summary is informational: a node or NodeTopology the cache lacks
	// must not hold the job up. Nor is it retried on a timer, which at
	// thousands of jobs costs a reconcile each every few seconds for as long
	// as they run: a NodeTopology published wakes the job
	// (watchNodeTopologies), and a summary that failed (a node the cache
	// does not hold yet) is redone on the job's next event.
	waiting, err := r.ensurePlacement(ctx, job, obs, claims)
	if job.Status.Placement != nil {
		job.Status.Placement.ComputeDomain = placementComputeDomain(job, r.Topology, claims)
	}
	switch {
	case err != nil:
		ctrl.LoggerFrom(ctx).V(2).Info("Placement not summarized", "err", err)
	case len(waiting) > 0:
		ctrl.LoggerFrom(ctx).V(5).Info("Placement not rated until the nodes publish their NodeTopology", "nodes", waiting)
	}
}

// ensureRestart records a restart, then deletes the pods it covers; they
// are recreated once gone. The status goes first, under optimistic
// concurrency, so a restart is counted once even if the deletes fail: the
// pods of a restarted gang carry the earlier count, and a later pass
// deletes them as stale (ensureStaleDeleted) without counting again.
func (r *TrainingJobReconciler) ensureRestart(ctx context.Context, job *v1alpha1.TrainingJob, d decision) error {
	scope := v1alpha1.RestartScopePod
	if d.gangRestart {
		scope = v1alpha1.RestartScopeGang
	}
	var runningSince *time.Time
	if c := meta.FindStatusCondition(job.Status.Conditions, string(v1alpha1.JobRunning)); c != nil && c.Status == metav1.ConditionTrue {
		runningSince = &c.LastTransitionTime.Time
	}
	job.Status.RestartCount++
	var when string
	kind := v1alpha1.RestartFailure
	if d.preemption != nil {
		kind = v1alpha1.RestartPreemption
		// No failure of the job's: its pods are created as soon as the old
		// ones are gone, to wait in the scheduler's queue, and the backoff
		// is neither waited out nor grown.
		job.Status.Preemptions++
		if b := job.Status.RestartBackoff; b != nil {
			b.NextAttemptTime = nil
		}
		when = fmt.Sprintf("the pods are created again once the old ones are gone (preemption %d, not counted against backoffLimit)", job.Status.Preemptions)
		setCondition(&job.Status, job.Generation, v1alpha1.ConditionPreempted, metav1.ConditionTrue, v1alpha1.ReasonPreemptedByScheduler,
			truncateMessage(d.preemption.message()))
	} else {
		if d.disruption != nil {
			// Not the job's failure, but spaced like one: a node that
			// flaps may take the next incarnation down too.
			kind = v1alpha1.RestartInfrastructure
			job.Status.InfrastructureRestarts++
		}
		job.Status.RestartBackoff = nextRestartBackoff(job.Spec.RunPolicy.RestartBackoff, job.Status.RestartBackoff, runningSince, r.Clock.Now())
		when = describeBackoff(job.Status.RestartBackoff)
	}
	msg := truncateMessage(fmt.Sprintf("restart %d (%s scope): %s; %s", job.Status.RestartCount, scope, d.incident, when))
	reason := ReasonRestarting
	if d.reason != "" {
		reason = d.reason
	}
	recordRestart(&job.Status, kind, reason, metav1.NewTime(r.Clock.Now()))
	setCondition(&job.Status, job.Generation, v1alpha1.JobRestarting, metav1.ConditionTrue, reason, msg)
	if meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobRunning)) {
		setCondition(&job.Status, job.Generation, v1alpha1.JobRunning, metav1.ConditionFalse, reason, msg)
	}
	if err := r.Client.Status().Update(ctx, job); err != nil {
		if apierrors.IsConflict(err) {
			// Decided on a stale job: decide again on the fresh one.
			return errStaleJob
		}
		return fmt.Errorf("recording restart of %s: %w", klog.KObj(job), err)
	}
	if d.preemption != nil {
		r.Recorder.Event(job, corev1.EventTypeWarning, ReasonPreempted, truncateMessage(d.preemption.message()))
		preemptionsTotal.WithLabelValues(string(job.Spec.Framework)).Inc()
	}
	r.Recorder.Event(job, corev1.EventTypeWarning, reason, "Restarting: "+msg)
	ctrl.LoggerFrom(ctx).V(2).Info("Restarting", "scope", scope, "kind", kind, "pods", len(d.restart), "restartCount", job.Status.RestartCount,
		"preemptions", job.Status.Preemptions, "infrastructureRestarts", job.Status.InfrastructureRestarts, "incident", d.incident)
	if err := r.deletePods(ctx, job, podsOf(d.restart)); err != nil {
		return err
	}
	if d.gangRestart {
		return r.resetPodGroupStatus(ctx, job)
	}
	return nil
}

// ensureStaleDeleted deletes the pods left of an earlier incarnation: a gang
// restart whose deletes were cut short (a crash, an API error) resumes here,
// and the new gang is created once they are gone. The PodGroup is re-armed
// again, which costs nothing when it already is.
func (r *TrainingJobReconciler) ensureStaleDeleted(ctx context.Context, job *v1alpha1.TrainingJob, stale []jobPod) error {
	if len(stale) == 0 {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Deleting pods of an earlier incarnation", "pods", len(stale), "restartCount", job.Status.RestartCount)
	if err := r.deletePods(ctx, job, podsOf(stale)); err != nil {
		return err
	}
	return r.resetPodGroupStatus(ctx, job)
}

func podsOf(jps []jobPod) []*corev1.Pod {
	pods := make([]*corev1.Pod, len(jps))
	for i, p := range jps {
		pods[i] = p.Pod
	}
	return pods
}

// ensureFinishedNow finishes a job: the condition only. The pods are
// cleaned up (cleanPodPolicy, ttlSecondsAfterFinished) on a later pass, once
// the cache shows the job finished: deleting them first would erase the
// pods the outcome was read from, and a status write that conflicted, or a
// pass on a job the cache still showed running, would then start the job
// over with new pods.
func (r *TrainingJobReconciler) ensureFinishedNow(ctx context.Context, job *v1alpha1.TrainingJob, out framework.Outcome) (ctrl.Result, error) {
	finish(&job.Status, job.Generation, out, metav1.NewTime(r.Clock.Now()))
	eventType := corev1.EventTypeNormal
	if out.Result == framework.Failed {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(job, eventType, out.Reason, "%s: %s", out.Result, out.Message)
	ctrl.LoggerFrom(ctx).V(2).Info("Job finished", "result", out.Result, "reason", out.Reason)
	return ctrl.Result{}, nil
}

// ensureFinished applies cleanPodPolicy and ttlSecondsAfterFinished to a
// finished job. A failed job's running pods are stopped whatever the
// policy: they hold GPUs and, their peers gone, would hang in a collective.
func (r *TrainingJobReconciler) ensureFinished(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod) (ctrl.Result, error) {
	// A finished job is not scaled any more.
	if err := r.deleteAutoscaler(ctx, job); err != nil {
		return ctrl.Result{}, err
	}
	policy := *job.Spec.RunPolicy.CleanPodPolicy
	failed := meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobFailed))
	var doomed []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		active := p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
		if policy == v1alpha1.CleanPodPolicyAll || active && (policy == v1alpha1.CleanPodPolicyRunning || failed) {
			doomed = append(doomed, p)
		}
	}
	if len(doomed) > 0 && r.expectations.Satisfied(job.UID, pods) {
		if err := r.deletePods(ctx, job, doomed); err != nil {
			return ctrl.Result{}, err
		}
	}
	ttl := job.Spec.RunPolicy.TTLSecondsAfterFinished
	if ttl == nil || job.Status.CompletionTime == nil {
		return ctrl.Result{}, nil
	}
	left := job.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second).Sub(r.Clock.Now())
	if left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground),
		client.Preconditions{UID: &job.UID})
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting finished TrainingJob %s: %w", klog.KObj(job), err)
	}
	r.Recorder.Eventf(job, corev1.EventTypeNormal, "Deleted", "Deleted %ds after it finished (ttlSecondsAfterFinished)", *ttl)
	return ctrl.Result{}, nil
}

// ensureSuspended deletes the pods of a suspended job (by its spec, or held
// by Kueue: reason and message say which) and resets its start time, so
// activeDeadlineSeconds counts from the resume. Deleting a suspended job's
// pods is no failure: no restart is counted.
//
// A job that asked for notice (runPolicy.preemptionNoticeSeconds) gets it
// first (suspendNotice): the result says when to look again.
func (r *TrainingJobReconciler) ensureSuspended(ctx context.Context, job *v1alpha1.TrainingJob, pods []*corev1.Pod, reason, message string) (ctrl.Result, error) {
	c := meta.FindStatusCondition(job.Status.Conditions, string(v1alpha1.JobSuspended))
	suspending := c == nil || c.Status != metav1.ConditionTrue
	if suspending || c.Reason != reason || c.Message != message {
		setCondition(&job.Status, job.Generation, v1alpha1.JobSuspended, metav1.ConditionTrue, reason, message)
		if meta.IsStatusConditionTrue(job.Status.Conditions, string(v1alpha1.JobRunning)) {
			setCondition(&job.Status, job.Generation, v1alpha1.JobRunning, metav1.ConditionFalse, reason, message)
		}
		if suspending {
			// A new suspension: its count is recorded before any pod is
			// deleted, so that the pods of this run, however long they
			// take to terminate, are never taken for members of the next.
			job.Status.Suspensions++
			if err := r.Client.Status().Update(ctx, job); err != nil {
				if apierrors.IsConflict(err) {
					return ctrl.Result{}, errStaleJob
				}
				return ctrl.Result{}, fmt.Errorf("recording suspension of %s: %w", klog.KObj(job), err)
			}
		}
		r.Recorder.Event(job, corev1.EventTypeNormal, reason, "Suspended: "+message)
	}
	job.Status.StartTime = nil
	job.Status.Placement = nil
	r.recordReplicas(job, observe(job, pods, v1alpha1.RestartScopePod))
	var live []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) == 0 || !r.expectations.Satisfied(job.UID, pods) {
		return ctrl.Result{}, nil
	}
	if left, err := r.suspendNotice(ctx, job, live); err != nil || left > 0 {
		return ctrl.Result{RequeueAfter: left}, err
	}
	return ctrl.Result{}, r.deletePods(ctx, job, live)
}

// recordReplicas copies the pod counts into the status.
func (r *TrainingJobReconciler) recordReplicas(job *v1alpha1.TrainingJob, obs observation) {
	for role, rs := range obs.replicas {
		rs.Selector = roleSelector(job, role)
		obs.replicas[role] = rs
	}
	job.Status.ReplicaStatuses = obs.replicas
	job.Status.TotalReplicas = job.Spec.TotalReplicas()
}

// updateStatus writes the status when it differs from original.
func (r *TrainingJobReconciler) updateStatus(ctx context.Context, job *v1alpha1.TrainingJob, original *v1alpha1.TrainingJobStatus) error {
	job.Status.ObservedGeneration = job.Generation
	if equality.Semantic.DeepEqual(&job.Status, original) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, job); err != nil {
		if apierrors.IsNotFound(err) {
			// The job is gone; its deletion is an event of its own.
			ctrl.LoggerFrom(ctx).V(5).Info("Status not written", "err", err)
			return nil
		}
		if apierrors.IsConflict(err) {
			ctrl.LoggerFrom(ctx).V(5).Info("Status not written", "err", err)
			return errStaleJob
		}
		return fmt.Errorf("updating status of TrainingJob %s: %w", klog.KObj(job), err)
	}
	*original = *job.Status.DeepCopy()
	return nil
}
