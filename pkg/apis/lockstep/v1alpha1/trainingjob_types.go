package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// TrainingJob is a distributed training job: one gang of pods in roles
// (Master, Worker, ...) that the controller creates together, places as one
// unit through the Lockstep scheduler, and restarts or finishes as one.
//
// Its fields follow Kubeflow's PyTorchJob/TFJob/MPIJob so that existing
// manifests convert mechanically (kubectl lockstep convert), and its pods get
// the environment Kubeflow's training-operator gives them, so training
// scripts run unchanged.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=tj
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicaSpecs.Worker.replicas,statuspath=.status.replicaStatuses.Worker.active,selectorpath=.status.replicaStatuses.Worker.selector
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Framework",type=string,JSONPath=`.spec.framework`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.totalReplicas`
// +kubebuilder:printcolumn:name="Efficiency",type=string,JSONPath=`.status.placement.efficiency`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restartCount`
// +kubebuilder:printcolumn:name="Checkpoint",type=integer,JSONPath=`.status.checkpoint.step`,description="The step of the last checkpoint a rank reported"
// +kubebuilder:printcolumn:name="Checkpointed",type=date,JSONPath=`.status.checkpoint.time`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 47",message="the name must be a DNS label of at most 47 characters starting with a letter: it names the job's Service, and pod hostnames <name>-<role>-<index> must fit in 63"
type TrainingJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TrainingJobSpec   `json:"spec"`
	Status TrainingJobStatus `json:"status,omitempty"`
}

// TrainingJobList is a list of TrainingJob.
//
// +kubebuilder:object:root=true
type TrainingJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingJob `json:"items"`
}

// TrainingJobSpec is the desired job. Validation (CEL rules below, repeated
// in Validate): roles valid for the framework; PyTorch needs a Master unless
// elastic, XGBoost a Master, MPI a Launcher; Master, Chief and Launcher run
// one replica; minAvailable within the total; framework-specific fields on
// their framework only. Roles and pod templates may change only while the
// job is suspended, when it has no pods: Kueue, for one, adds node selectors
// and tolerations to a suspended job as it admits it.
//
// +kubebuilder:validation:XValidation:rule="self.replicaSpecs.all(r, r in (self.framework in ['PyTorch', 'XGBoost', 'Paddle'] ? ['Master', 'Worker'] : self.framework == 'TensorFlow' ? ['Chief', 'Master', 'PS', 'Worker', 'Evaluator'] : self.framework == 'MPI' ? ['Launcher', 'Worker'] : ['Worker']))",message="roles must be valid for the framework: PyTorch, XGBoost and Paddle take Master and Worker; TensorFlow takes Chief, Master, PS, Worker and Evaluator; MPI takes Launcher and Worker; JAX takes Worker",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="self.framework != 'PyTorch' || has(self.elasticPolicy) || 'Master' in self.replicaSpecs",message="a PyTorch job needs a Master replica unless elasticPolicy is set",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="self.framework != 'XGBoost' || 'Master' in self.replicaSpecs",message="an XGBoost job needs a Master replica",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="self.framework != 'MPI' || 'Launcher' in self.replicaSpecs",message="an MPI job needs a Launcher replica",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="self.framework == 'Paddle' || self.replicaSpecs.all(r, !(r in ['Master', 'Chief', 'Launcher']) || !has(self.replicaSpecs[r].replicas) || self.replicaSpecs[r].replicas == 1)",message="Master, Chief and Launcher run exactly one replica (replicas: 1)",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="!('Chief' in self.replicaSpecs && 'Master' in self.replicaSpecs)",message="Chief and Master are the same role in TensorFlow; give one of them",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="!has(self.runPolicy) || !has(self.runPolicy.schedulingPolicy) || !has(self.runPolicy.schedulingPolicy.minAvailable) || self.runPolicy.schedulingPolicy.minAvailable <= self.replicaSpecs.map(r, has(self.replicaSpecs[r].replicas) ? self.replicaSpecs[r].replicas : 1).sum()",message="must not exceed the total number of replicas",fieldPath=`.runPolicy.schedulingPolicy.minAvailable`
// +kubebuilder:validation:XValidation:rule="!has(self.elasticPolicy) || self.framework == 'PyTorch'",message="elasticPolicy applies to PyTorch jobs only",fieldPath=`.elasticPolicy`
// +kubebuilder:validation:XValidation:rule="!has(self.elasticPolicy) || ('Worker' in self.replicaSpecs && (!has(self.elasticPolicy.minReplicas) || (has(self.replicaSpecs['Worker'].replicas) ? self.replicaSpecs['Worker'].replicas : 1) >= self.elasticPolicy.minReplicas) && (!has(self.elasticPolicy.maxReplicas) || (has(self.replicaSpecs['Worker'].replicas) ? self.replicaSpecs['Worker'].replicas : 1) <= self.elasticPolicy.maxReplicas))",message="an elastic job needs Worker replicas between elasticPolicy.minReplicas and elasticPolicy.maxReplicas",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="!has(self.nprocPerNode) || self.framework == 'PyTorch'",message="nprocPerNode applies to PyTorch jobs only",fieldPath=`.nprocPerNode`
// +kubebuilder:validation:XValidation:rule="!has(self.mpi) || self.framework == 'MPI'",message="mpi applies to MPI jobs only",fieldPath=`.mpi`
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.runPolicy) && has(oldSelf.runPolicy.suspend) && oldSelf.runPolicy.suspend) || (self.replicaSpecs.size() == oldSelf.replicaSpecs.size() && self.replicaSpecs.all(r, r in oldSelf.replicaSpecs && self.replicaSpecs[r].template == oldSelf.replicaSpecs[r].template))",message="roles and pod templates are immutable unless the job is suspended (runPolicy.suspend)",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.runPolicy) && has(oldSelf.runPolicy.suspend) && oldSelf.runPolicy.suspend) || self.replicaSpecs.all(r, !(r in oldSelf.replicaSpecs) || (has(self.elasticPolicy) && r == 'Worker') || (has(self.replicaSpecs[r].replicas) ? self.replicaSpecs[r].replicas : 1) == (has(oldSelf.replicaSpecs[r].replicas) ? oldSelf.replicaSpecs[r].replicas : 1))",message="replicas can change only while the job is suspended (runPolicy.suspend), or for the Workers of an elastic job: the running pods were started with the old world size; suspend the job, change replicas, then resume it",fieldPath=`.replicaSpecs`
// +kubebuilder:validation:XValidation:rule="self.replicaSpecs.map(r, has(self.replicaSpecs[r].replicas) ? self.replicaSpecs[r].replicas : 1).sum() >= 1",message="the job has no pods: at least one role needs replicas of 1 or more",fieldPath=`.replicaSpecs`
type TrainingJobSpec struct {
	// Framework is the training framework. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="framework is immutable"
	Framework Framework `json:"framework"`

	// ReplicaSpecs maps each role to its pods, e.g. {Master: ..., Worker: ...}.
	// Roles are those of the framework (FrameworkRoles); roles and templates
	// are immutable unless the job is suspended.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=5
	ReplicaSpecs map[ReplicaType]ReplicaSpec `json:"replicaSpecs"`

	// RunPolicy says how long the job may run, how often it may fail, how it
	// is gang-scheduled and whether it runs at all (suspend).
	// +optional
	RunPolicy *RunPolicy `json:"runPolicy,omitempty"`

	// ElasticPolicy makes a PyTorch job elastic (torchrun rendezvous over a
	// varying number of Workers). With it, Master is optional.
	// +optional
	ElasticPolicy *ElasticPolicy `json:"elasticPolicy,omitempty"`

	// NprocPerNode is torchrun's --nproc-per-node for PyTorch jobs: "auto",
	// "cpu", "gpu" or a positive integer, a string as in Kubeflow. It is
	// injected as PET_NPROC_PER_NODE; WORLD_SIZE is the number of pods times
	// this when it is an integer, else the number of pods. When unset, pods
	// with a Master see "auto".
	// +kubebuilder:validation:Pattern=`^(auto|cpu|gpu|[1-9][0-9]{0,4})$`
	// +optional
	NprocPerNode *string `json:"nprocPerNode,omitempty"`

	// MPI configures MPI jobs: hostfile slots, SSH and the MPI
	// implementation. Defaults apply when unset.
	// +optional
	MPI *MPIPolicy `json:"mpi,omitempty"`

	// SuccessPolicy says when a job without a primary role (Master, Chief,
	// Launcher) has succeeded. Default: the framework's rule (TensorFlow:
	// Worker 0 succeeded; elastic PyTorch: any Worker succeeded; otherwise
	// every Worker). AllWorkers: every Worker succeeded.
	// +kubebuilder:validation:Enum=Default;AllWorkers
	// +optional
	SuccessPolicy SuccessPolicy `json:"successPolicy,omitempty"`

	// FailurePolicy says what is restarted when a pod fails and which exit
	// codes are worth a retry.
	// +optional
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`

	// Topology constrains how widely the gang may spread over the network.
	// +optional
	Topology *TopologyConstraint `json:"topology,omitempty"`
}

// ReplicaSpec is the pods of one role.
type ReplicaSpec struct {
	// Replicas is the number of pods of this role. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// RestartPolicy says whether a failed pod of this role is retried:
	// Always and OnFailure retry, Never does not, ExitCode retries only
	// retryable exit codes (failurePolicy.retryableExitCodes; by default
	// 128-255, a process killed by a signal). The failure policy says what
	// a retry restarts. Defaults to Kubeflow's default for the framework:
	// OnFailure for PyTorch, Paddle and the MPI Launcher, Never otherwise
	// (see DefaultRestartPolicy).
	// +optional
	RestartPolicy RestartPolicy `json:"restartPolicy,omitempty"`

	// Template is the pod template of this role. The controller adds the
	// framework's environment, ports and volumes, the hostname and subdomain
	// that make the pod resolvable, the gang label and the scheduler name.
	Template corev1.PodTemplateSpec `json:"template"`
}

// DesiredReplicas is the number of pods of the role, 1 when unset.
func (r *ReplicaSpec) DesiredReplicas() int32 {
	if r.Replicas == nil {
		return 1
	}
	return *r.Replicas
}

// RestartPolicy says whether a failed pod is retried.
//
// +kubebuilder:validation:Enum=Always;OnFailure;Never;ExitCode
type RestartPolicy string

const (
	RestartAlways    RestartPolicy = "Always"
	RestartOnFailure RestartPolicy = "OnFailure"
	RestartNever     RestartPolicy = "Never"
	RestartExitCode  RestartPolicy = "ExitCode"
)

// RunPolicy is how the job runs, as in Kubeflow's runPolicy.
type RunPolicy struct {
	// CleanPodPolicy says which pods to delete when the job finishes: All,
	// Running (those still running, e.g. parameter servers or MPI workers),
	// or None. Defaults to None.
	// +kubebuilder:default=None
	// +optional
	CleanPodPolicy *CleanPodPolicy `json:"cleanPodPolicy,omitempty"`

	// TTLSecondsAfterFinished deletes the job this long after it finishes.
	// Unset: kept until deleted.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// ActiveDeadlineSeconds fails the job when it has run this long since
	// status.startTime. Unset: no deadline.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// BackoffLimit is how many restarts for failures the job may have
	// before it fails: status.restartCount - status.preemptions (a
	// preemption is not the job's failure). Defaults to 6, as for a Job: a
	// job that fails on every start must end, not restart forever. Restarts
	// are spaced by restartBackoff.
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// RestartBackoff spaces the restarts of a job that keeps failing.
	// Defaults: 10 s, doubling, at most 360 s, reset after 600 s of the
	// gang running.
	// +optional
	RestartBackoff *RestartBackoff `json:"restartBackoff,omitempty"`

	// Suspend stops the job: no pods run while it is true, and pods that
	// run are deleted when it becomes true. It stays mutable. Defaults to
	// false.
	// +kubebuilder:default=false
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// SchedulingPolicy configures the job's PodGroup.
	// +optional
	SchedulingPolicy *SchedulingPolicy `json:"schedulingPolicy,omitempty"`

	// UnreachableToleranceSeconds is how long a member may sit on a node
	// that stopped answering (Ready False or Unknown with the
	// node.kubernetes.io/unreachable or not-ready NoExecute taint, or a node
	// tainted node.kubernetes.io/out-of-service), counted from the taint's
	// timeAdded, before the member counts as lost: a gang restarts whole on
	// healthy nodes (reason NodeUnreachable), other scopes replace the
	// member. It is also the tolerationSeconds of the pods' unreachable and
	// not-ready tolerations, unless the template tolerates those taints
	// itself. 0 restarts as soon as the node is marked unreachable or
	// NotReady. Defaults to 30, well under the cluster's 300 s default
	// toleration: a gang cannot use a dead rank. A node whose kubelet still
	// answers but reports NotReady (a container runtime or CNI that is not
	// ready) is given at least the cluster's 300 s: its kubelet still
	// reports the containers, and one that really stopped fails its pod.
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	UnreachableToleranceSeconds *int32 `json:"unreachableToleranceSeconds,omitempty"`

	// UnreachableForceDeleteSeconds is how long the job's pods that are
	// being deleted on a node whose kubelet stopped posting status (Ready
	// Unknown with the node.kubernetes.io/unreachable taint) wait, counted
	// from the taint's timeAdded, before the controller force-deletes
	// them. Until then nobody but their kubelet may say their containers
	// stopped: a node cut off from the API server only (a ToR reboot, a
	// management-network blip) still runs them, and its kubelet kills them
	// and confirms once it reconnects. A gang does not wait for them: its
	// next incarnation has other pod names and a fenced rendezvous
	// (docs/controller.md). A node tainted node.kubernetes.io/out-of-service
	// is proof at once. Defaults to 600, twice the cluster's 300 s eviction
	// default; 0 force-deletes as soon as the node is unreachable.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	// +optional
	UnreachableForceDeleteSeconds *int32 `json:"unreachableForceDeleteSeconds,omitempty"`

	// RestartOverheadSeconds is how long the job takes after a restart
	// before it makes progress again (loading its checkpoint, compiling,
	// warming up). The scheduler adds it to the work an eviction of the
	// job loses, the GPU time since its last checkpoint
	// (status.checkpoint), when it chooses what to preempt
	// (docs/scheduler.md, "Preemption"). Defaults to 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	RestartOverheadSeconds *int32 `json:"restartOverheadSeconds,omitempty"`

	// PreemptionNoticeSeconds asks for notice before the job's pods are
	// evicted: the scheduler, before evicting the job for a higher-priority
	// gang, and the controller, before deleting the pods of a job that is
	// suspended (by its spec or by Kueue), annotate every pod with
	// lockstep.dev/preemption-notice and wait until a rank reports a
	// checkpoint made since (status.checkpoint's protocol), a pod goes,
	// or the notice runs out; then the pods are deleted with their
	// termination grace period. The preemptor's hold covers the wait
	// (docs/controller.md, "Preemption notice"). Defaults to 0: no notice.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	PreemptionNoticeSeconds *int32 `json:"preemptionNoticeSeconds,omitempty"`
}

// RestartBackoff spaces the restarts of a job, as the Job controller spaces
// the retries of a Job's failed pods: pods pass restartPolicy Never to the
// kubelet, so its crash-loop backoff never applies, and without a delay a
// rank that fails on every start would replan and recreate the whole gang
// in a tight loop. After a restart the old pods are deleted at once (they
// free their GPUs), and the new ones are created initialSeconds later,
// doubling with each restart in a row up to maxSeconds. A gang that ran
// for resetAfterSeconds before failing starts again at initialSeconds.
//
// +kubebuilder:validation:XValidation:rule="!has(self.initialSeconds) || !has(self.maxSeconds) || self.initialSeconds <= self.maxSeconds",message="initialSeconds must not exceed maxSeconds",fieldPath=`.initialSeconds`
type RestartBackoff struct {
	// InitialSeconds is the delay after the first restart in a row.
	// Defaults to 10. At least 1: a restart without delay is what this
	// guards against.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	InitialSeconds *int32 `json:"initialSeconds,omitempty"`

	// MaxSeconds caps the delay. Defaults to 360 (a Job's cap).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	MaxSeconds *int32 `json:"maxSeconds,omitempty"`

	// ResetAfterSeconds is how long the gang must have been Running before
	// a failure for the delay to start over at initialSeconds. Defaults to
	// 600, as the kubelet resets a container's crash-loop backoff.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ResetAfterSeconds *int32 `json:"resetAfterSeconds,omitempty"`
}

// Restart backoff defaults (RestartBackoff) and the default backoffLimit.
const (
	DefaultBackoffLimit             int32 = 6
	DefaultRestartInitialSeconds    int32 = 10
	DefaultRestartMaxSeconds        int32 = 360
	DefaultRestartResetAfterSeconds int32 = 600
)

// DefaultUnreachableToleranceSeconds is runPolicy.unreachableToleranceSeconds
// when unset; MaxUnreachableToleranceSeconds its bound.
const (
	DefaultUnreachableToleranceSeconds int32 = 30
	MaxUnreachableToleranceSeconds     int32 = 3600
)

// DefaultUnreachableForceDeleteSeconds is
// runPolicy.unreachableForceDeleteSeconds when unset;
// MaxUnreachableForceDeleteSeconds its bound (a week).
const (
	DefaultUnreachableForceDeleteSeconds int32 = 600
	MaxUnreachableForceDeleteSeconds     int32 = 7 * 24 * 3600
)

// NotReadyToleranceSeconds is the least a member waits on a node whose
// kubelet answers but reports NotReady: the cluster's DefaultTolerationSeconds.
const NotReadyToleranceSeconds int32 = 300

// IsSuspended says whether runPolicy.suspend is true.
func (s *TrainingJobSpec) IsSuspended() bool {
	return s.RunPolicy != nil && s.RunPolicy.Suspend != nil && *s.RunPolicy.Suspend
}

// CleanPodPolicy says which pods to delete when a job finishes.
//
// +kubebuilder:validation:Enum=All;Running;None
type CleanPodPolicy string

const (
	CleanPodPolicyAll     CleanPodPolicy = "All"
	CleanPodPolicyRunning CleanPodPolicy = "Running"
	CleanPodPolicyNone    CleanPodPolicy = "None"
)

// SchedulingPolicy is the gang-scheduling configuration, as in Kubeflow.
type SchedulingPolicy struct {
	// MinAvailable is the PodGroup's minMember: how many pods must be placed
	// together before any runs. Defaults to the total number of replicas; it
	// may not exceed it.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`

	// PriorityClass is the PriorityClass of the job's pods and PodGroup. A
	// class that does not exist holds the job (no pods; Scheduled=False with
	// reason PriorityClassNotFound) until it is created.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClass string `json:"priorityClass,omitempty"`

	// Queue names the queue that admits the job, for queueing systems that
	// read it (Kubeflow passed it to Volcano).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Queue string `json:"queue,omitempty"`

	// ScheduleTimeoutSeconds is how long the scheduler waits for the whole
	// gang before it gives the gang's reservations back (PodGroup
	// scheduleTimeoutSeconds). Unset: the scheduler's default.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// SuccessPolicy says when a job without a primary role has succeeded.
type SuccessPolicy string

const (
	SuccessPolicyDefault    SuccessPolicy = "Default"
	SuccessPolicyAllWorkers SuccessPolicy = "AllWorkers"
)

// FailurePolicy is what the controller does when a pod fails.
type FailurePolicy struct {
	// Restart is what a retry restarts: the failed pod alone (Pod) or every
	// pod of the job (Gang). Defaults to Gang for PyTorch, MPI and JAX, whose
	// collectives cannot survive losing a member, and to Pod otherwise.
	// +optional
	Restart RestartScope `json:"restart,omitempty"`

	// RetryableExitCodes are the exit codes worth a retry for roles with
	// restartPolicy ExitCode. Unset: 128-255 (killed by a signal: OOM kill,
	// eviction, preemption), as in Kubeflow.
	// +listType=set
	// +kubebuilder:validation:MaxItems=255
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	// +optional
	RetryableExitCodes []int32 `json:"retryableExitCodes,omitempty"`
}

// RestartScope is what a retry restarts.
//
// +kubebuilder:validation:Enum=Pod;Gang
type RestartScope string

const (
	RestartScopePod  RestartScope = "Pod"
	RestartScopeGang RestartScope = "Gang"
)

// IsRetryableExitCode says whether a container that exited with code is
// worth a retry under restartPolicy ExitCode.
func (p *FailurePolicy) IsRetryableExitCode(code int32) bool {
	if p == nil || len(p.RetryableExitCodes) == 0 {
		return code >= 128 && code <= 255
	}
	return slices.Contains(p.RetryableExitCodes, code)
}

// TopologyConstraint bounds how widely the gang may spread.
type TopologyConstraint struct {
	// Level is a topology level name from the scheduler's configuration,
	// narrowest first: host, clique, leaf, spine, block by default. The gang
	// is placed within one domain of this level.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Level string `json:"level"`

	// Mode says whether the level is a hard constraint (Required: the gang
	// waits until one domain can hold it) or a preference (Preferred: the
	// narrowest domain that fits is chosen). Defaults to Preferred.
	// +kubebuilder:default=Preferred
	// +optional
	Mode TopologyMode `json:"mode,omitempty"`

	// ComputeDomain says whether a gang constrained to a multi-node NVLink
	// level (an NVL72 clique) gets an NVIDIA ComputeDomain, without which
	// its pods on different nodes cannot reach each other over NVLink.
	// Auto (the default when unset): when the level is an NVLink level and
	// more than one pod asks for GPUs, the controller creates one per job
	// before the pods and gives every GPU container its IMEX channel claim
	// (docs/controller.md, "ComputeDomains"). Disabled: never; the pods
	// talk over the network.
	// +optional
	ComputeDomain ComputeDomainPolicy `json:"computeDomain,omitempty"`

	// GPUClaims says whether the controller makes the pods' GPU claims ask
	// for one PCIe root first, the NVLink-connected set on nodes where
	// NVLink does not join every GPU (a DGX-1's quads). Auto (the default
	// when unset): pods whose ResourceClaimTemplates ask for two or more
	// GPUs of the gpu.nvidia.com class claim from a copy the job owns
	// whose GPU requests prefer one PCIe root and fall back to any GPUs
	// (docs/controller.md, "GPU claims"). AsWritten: the pods claim from
	// the templates as written, and the allocator takes the first free
	// GPUs.
	// +optional
	GPUClaims GPUClaimsPolicy `json:"gpuClaims,omitempty"`
}

// GPUClaimsPolicy says whether a job's GPU claims are rewritten to ask for
// one PCIe root first.
//
// +kubebuilder:validation:Enum=Auto;AsWritten
type GPUClaimsPolicy string

const (
	GPUClaimsAuto      GPUClaimsPolicy = "Auto"
	GPUClaimsAsWritten GPUClaimsPolicy = "AsWritten"
)

// ComputeDomainPolicy says whether a job gets a ComputeDomain.
//
// +kubebuilder:validation:Enum=Auto;Disabled
type ComputeDomainPolicy string

const (
	ComputeDomainAuto     ComputeDomainPolicy = "Auto"
	ComputeDomainDisabled ComputeDomainPolicy = "Disabled"
)

// TopologyMode is how strict a topology constraint is.
//
// +kubebuilder:validation:Enum=Required;Preferred
type TopologyMode string

const (
	// The contract's constraint modes (pkg/lockstep), as the API spells them.
	TopologyRequired  = TopologyMode(lockstep.Required)
	TopologyPreferred = TopologyMode(lockstep.Preferred)
)

// TotalReplicas is the number of pods of the job over all roles.
func (s *TrainingJobSpec) TotalReplicas() int32 {
	var n int32
	for _, r := range s.ReplicaSpecs {
		n += r.DesiredReplicas()
	}
	return n
}

// HasRole says whether the job has pods of role (a spec with 0 replicas
// still counts: it names the role).
func (s *TrainingJobSpec) HasRole(role ReplicaType) bool {
	_, ok := s.ReplicaSpecs[role]
	return ok
}
