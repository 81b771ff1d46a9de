package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrainingJobStatus is the observed state of a job.
type TrainingJobStatus struct {
	// Conditions are Created, Running, Restarting, Succeeded, Failed and
	// Suspended (also the job's states); Scheduled: False with the
	// scheduler's reason while the gang cannot be placed (an unknown
	// topology level, a gang larger than the cluster, a template no node
	// fits, a PodGroup the scheduler rejected, a PriorityClass that does not
	// exist); Preempted: True while the gang restarts after a preemption.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// State is the latest condition in one word, for `kubectl get`.
	// +optional
	State JobState `json:"state,omitempty"`

	// ReplicaStatuses counts the pods of each role by phase.
	// +optional
	ReplicaStatuses map[ReplicaType]ReplicaStatus `json:"replicaStatuses,omitempty"`

	// TotalReplicas is the number of pods of the job over all roles.
	// +optional
	TotalReplicas int32 `json:"totalReplicas,omitempty"`

	// RestartCount is how often the job (Gang) or one of its pods (Pod) was
	// restarted, for any reason, preemptions and infrastructure included.
	// Under a gang scope it is also the gang's incarnation: each pod carries
	// the count it was created under (lockstep.dev/incarnation,
	// LOCKSTEP_INCARNATION) and is named for it. runPolicy.backoffLimit
	// bounds the failures among them, restartCount - preemptions -
	// infrastructureRestarts.
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`

	// Preemptions counts the gang restarts caused by a higher-priority
	// workload taking the gang's place: the scheduler (Lockstep's gang
	// preemption or upstream's DefaultPreemption) marked a member with a
	// DisruptionTarget condition of reason PreemptionByScheduler and
	// deleted it. Each is also counted in restartCount (it is a new
	// incarnation), once per preemption of the gang however many members it
	// took, but not against runPolicy.backoffLimit, and it neither waits out
	// nor grows the restart backoff: a preemption is no failure of the job.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Preemptions int32 `json:"preemptions,omitempty"`

	// InfrastructureRestarts counts the restarts the cluster caused: a
	// member's node stopped answering or was deleted, or the member was
	// evicted by the kubelet (node pressure), the taint manager, the pod
	// garbage collector or the Eviction API (a drain), as its
	// DisruptionTarget condition says. Like preemptions they are in
	// restartCount but not counted against runPolicy.backoffLimit, as a
	// Job's podFailurePolicy ignores DisruptionTarget; unlike them they are
	// spaced by the restart backoff, since a flapping node may take the
	// next incarnation down too.
	// +kubebuilder:validation:Minimum=0
	// +optional
	InfrastructureRestarts int32 `json:"infrastructureRestarts,omitempty"`

	// Restarts are the latest restarts, oldest first, at most
	// MaxRestartRecords: which kind each was and why.
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Restarts []RestartRecord `json:"restarts,omitempty"`

	// RestartBackoff is where the restart backoff stands: when the pods of
	// the latest restart are created again. Unset before the first restart.
	// +optional
	RestartBackoff *RestartBackoffStatus `json:"restartBackoff,omitempty"`

	// Suspensions counts how often the job was suspended (by its spec or by
	// a queue). Pods carry the count they were created under
	// (lockstep.dev/suspensions), so pods of a run that was stopped and are
	// still terminating when the job resumes are waited for, never taken
	// for members lost from the new run: a suspension is no failure.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Suspensions int32 `json:"suspensions,omitempty"`

	// StartTime is when the controller first started the job's pods; it is
	// reset when the job is suspended.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the job succeeded or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Placement is where the gang runs and how good that is.
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// Checkpoint is the newest checkpoint a rank of the job reported
	// (docs/controller.md, "Checkpoints"): every incarnation created after
	// it carries its location and step (LOCKSTEP_RESUME_FROM,
	// LOCKSTEP_RESUME_STEP), and the scheduler costs evicting the job by
	// the work since it. Only reports of the incarnation that runs count:
	// a rank of an earlier one, still running on a partitioned node, may
	// have written a checkpoint the new incarnation never agreed on.
	// +optional
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// CheckpointStatus is a checkpoint report, and the rank that made it.
type CheckpointStatus struct {
	// Step is the training step the checkpoint holds.
	// +kubebuilder:validation:Minimum=0
	Step int64 `json:"step"`
	// Time is when the rank says the checkpoint was complete.
	Time metav1.Time `json:"time"`
	// Location is where it is: an absolute URI.
	// +kubebuilder:validation:MaxLength=1024
	Location string `json:"location"`
	// Pod is the pod that reported it.
	Pod string `json:"pod"`
	// ReplicaType and Index are that pod's role and index.
	ReplicaType ReplicaType `json:"replicaType"`
	Index       int32       `json:"index"`
	// Rank is that pod's global rank (its lockstep.dev/rank annotation),
	// for frameworks that number ranks; unset otherwise.
	// +optional
	Rank *int32 `json:"rank,omitempty"`
	// Incarnation is the incarnation (restartCount) the pod ran under.
	Incarnation int32 `json:"incarnation"`
	// Source is how it was reported: the pod's lockstep.dev/checkpoint
	// annotation, or its container's termination message.
	// +kubebuilder:validation:Enum=Annotation;TerminationMessage
	Source CheckpointSource `json:"source"`
}

// CheckpointSource is how a checkpoint was reported.
type CheckpointSource string

const (
	CheckpointFromAnnotation         CheckpointSource = "Annotation"
	CheckpointFromTerminationMessage CheckpointSource = "TerminationMessage"
)

// RestartKind is what caused a restart: the job's own failure (counted
// against runPolicy.backoffLimit), a preemption, or the infrastructure.
//
// +kubebuilder:validation:Enum=Failure;Preemption;Infrastructure
type RestartKind string

const (
	RestartFailure        RestartKind = "Failure"
	RestartPreemption     RestartKind = "Preemption"
	RestartInfrastructure RestartKind = "Infrastructure"
)

// MaxRestartRecords is how many restarts status.restarts keeps.
const MaxRestartRecords = 10

// RestartRecord is one restart of a job.
type RestartRecord struct {
	// RestartCount is the job's restartCount this restart made: the
	// incarnation its new pods run under.
	RestartCount int32 `json:"restartCount"`
	// Kind is what caused it.
	Kind RestartKind `json:"kind"`
	// Reason is the Restarting condition's reason for it (NodeUnreachable,
	// PreemptedByScheduler, TerminationByKubelet, Restarting, ...).
	Reason string `json:"reason"`
	// Time is when it was recorded.
	Time metav1.Time `json:"time"`
}

// RestartBackoffStatus is the state of a job's restart backoff.
type RestartBackoffStatus struct {
	// ConsecutiveRestarts counts the restarts since the gang last ran for
	// runPolicy.restartBackoff.resetAfterSeconds; the delay doubles with
	// each.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ConsecutiveRestarts int32 `json:"consecutiveRestarts,omitempty"`

	// LastRestartTime is when the latest restart was recorded.
	// +optional
	LastRestartTime *metav1.Time `json:"lastRestartTime,omitempty"`

	// NextAttemptTime is when the pods of the latest restart are created
	// again; unset once they have been.
	// +optional
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`
}

// JobState is a one-word summary of a job.
//
// +kubebuilder:validation:Enum=Created;Running;Restarting;Succeeded;Failed;Suspended
type JobState string

// Condition types of a TrainingJob, also its states.
const (
	JobCreated    JobState = "Created"
	JobRunning    JobState = "Running"
	JobRestarting JobState = "Restarting"
	JobSucceeded  JobState = "Succeeded"
	JobFailed     JobState = "Failed"
	JobSuspended  JobState = "Suspended"
)

// ConditionScheduled is True once every pod of the gang is bound, and False
// with the reason while the scheduler cannot place it. It is not a state.
const ConditionScheduled = "Scheduled"

// ConditionPreempted is True, with reason ReasonPreemptedByScheduler and a
// message naming the preemptor, its priority and the domain it took (or "a
// higher-priority pod" when the preemptor is unknown, as with upstream's
// DefaultPreemption), from the moment a preemption restarts the gang until
// the gang runs whole again; then False with reason GangRunning, the
// message keeping who preempted it. It is not a state.
const ConditionPreempted = "Preempted"

// ReasonPreemptedByScheduler is the reason of the Preempted condition, and
// of the Restarting condition of a restart caused by a preemption.
const ReasonPreemptedByScheduler = "PreemptedByScheduler"

// ConditionResizing is True while an elastic job queued in Kueue runs
// fewer pods than it asks for, the rest waiting for Kueue to admit the
// larger size (the message says how many and Kueue's reason), and False
// once the resize is done. It is not a state.
const ConditionResizing = "Resizing"

// ConditionComputeDomainReady is, for a job that gets an NVIDIA
// ComputeDomain (spec.topology.computeDomain), True with reason
// ComputeDomainReady once the driver reports every node of the domain
// ready, and False while it does not (ComputeDomainNotReady), while the
// cluster serves no ComputeDomain API (ComputeDomainAPIMissing: no pods
// are created until it does), while a ComputeDomain of the same name that
// is not the job's is in the way (ComputeDomainConflict) or while the
// job's old one is being deleted (ComputeDomainDeleting). It is not a
// state.
const ConditionComputeDomainReady = "ComputeDomainReady"

// ConditionGPUClaimTemplatesReady is, for a job whose pods claim GPUs
// through ResourceClaimTemplates (spec.topology.gpuClaims not AsWritten),
// True with reason GPUClaimTemplatesReady once the templates the pods claim
// from exist: the job's one-PCIe-root-first copies, or the user's where
// nothing is rewritten. False while a template the pods name is missing
// (GPUClaimTemplateMissing: no pods are created until it exists), while an
// object not the job's holds a copy's name (GPUClaimTemplateConflict) or
// while a copy of a replaced template is being deleted
// (GPUClaimTemplateDeleting). It is not a state.
const ConditionGPUClaimTemplatesReady = "GPUClaimTemplatesReady"

// ReplicaStatus counts the pods of one role by phase.
type ReplicaStatus struct {
	// Active pods are pending or running.
	// +optional
	Active int32 `json:"active,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Selector selects the role's pods, in label selector string form: the
	// /scale subresource's selector, by which a HorizontalPodAutoscaler
	// finds the Workers' metrics.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// Placement is the modelled quality of the gang's placement, as the
// scheduler's topology plugin computed it.
type Placement struct {
	// Domain is the narrowest topology domain holding every pod as
	// topology.Domain.DisplayID writes it (as the PodGroup annotation does),
	// e.g. "block=b1/spine=s2/leaf=l7", "spine=s2/leaf=l7/host=node-3" on one
	// node.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Domain string `json:"domain,omitempty"`

	// LevelName is that domain's level: host, clique, leaf, spine, block or
	// cluster.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	LevelName string `json:"levelName,omitempty"`

	// LevelsSpanned is how many levels the gang crosses up to that domain: 0
	// on one host, one per level with a labelled domain (levels no node is
	// labelled for are not counted).
	// +kubebuilder:validation:Minimum=0
	// +optional
	LevelsSpanned int32 `json:"levelsSpanned,omitempty"`

	// Nodes are the nodes the gang runs on.
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Nodes []string `json:"nodes,omitempty"`

	// BusBandwidthMBps is the modelled per-GPU all-reduce bus bandwidth, the
	// bottleneck of the placement, in MB/s.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BusBandwidthMBps int64 `json:"busBandwidthMBps,omitempty"`

	// Efficiency is the modelled all-reduce time of the best placement on an
	// empty cluster divided by that of this one, in (0, 1]: the placement's
	// topology.Rating, which the scheduler's PodGroup annotation also
	// reports, as a decimal string with three digits ("0.973";
	// lockstep.FormatEfficiency). A string because CRDs do not allow floats.
	// +kubebuilder:validation:Pattern=`^(0\.[0-9]{1,3}|1\.0{1,3})$`
	// +optional
	Efficiency string `json:"efficiency,omitempty"`

	// Reason explains Efficiency: where the gang is and what it loses
	// against the best placement, e.g. "spans 2 leaves (l1, l2) under spine
	// s1; crossing the 2:1 oversubscribed spine cuts bus bandwidth from 50.0
	// to 25.0 GB/s".
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`

	// ComputeDomain is the job's NVIDIA ComputeDomain, for a gang that
	// spans nodes of a multi-node NVLink domain; unset without one.
	// +optional
	ComputeDomain *PlacementComputeDomain `json:"computeDomain,omitempty"`

	// Devices are the DRA devices each pod of the gang holds through its
	// ResourceClaims, as the scheduler allocated them: its GPUs and, with a
	// ComputeDomain, its IMEX channel. Pods that hold none (GPUs through
	// nvidia.com/gpu) are not listed.
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Devices []PodDevices `json:"devices,omitempty"`
}

// PodDevices are the DRA devices one pod holds.
type PodDevices struct {
	// Pod is the pod's name, in the job's namespace.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// Node is the node the pod runs on.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`

	// Devices are the devices allocated to the pod's claims, each
	// "<driver>/<pool>/<device>" as the claim's status names it, e.g.
	// "gpu.nvidia.com/node-3/gpu-5", sorted.
	// +listType=set
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=512
	Devices []string `json:"devices"`
}

// PlacementComputeDomain names a job's ComputeDomain and says whether the
// driver reports it ready (the ComputeDomainReady condition has why not).
type PlacementComputeDomain struct {
	// Name is the ComputeDomain's name, in the job's namespace.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Ready says whether its IMEX daemons are ready on all its nodes.
	// +optional
	Ready bool `json:"ready,omitempty"`
}
