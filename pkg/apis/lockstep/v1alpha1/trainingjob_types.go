package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
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
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Framework",type=string,JSONPath=`.spec.framework`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.totalReplicas`
// +kubebuilder:printcolumn:name="Efficiency",type=string,JSONPath=`.status.placement.efficiency`
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

// Framework is the training framework of a job. It decides the roles a job
// may have, the environment its pods get and when it has succeeded.
//
// +kubebuilder:validation:Enum=PyTorch;TensorFlow;MPI;JAX;XGBoost;Paddle
type Framework string

const (
	FrameworkPyTorch    Framework = "PyTorch"
	FrameworkTensorFlow Framework = "TensorFlow"
	FrameworkMPI        Framework = "MPI"
	FrameworkJAX        Framework = "JAX"
	FrameworkXGBoost    Framework = "XGBoost"
	FrameworkPaddle     Framework = "Paddle"
)

// ReplicaType is a role in a job. Which roles a job may have depends on its
// framework (see FrameworkRoles).
type ReplicaType string

const (
	ReplicaMaster    ReplicaType = "Master"
	ReplicaWorker    ReplicaType = "Worker"
	ReplicaChief     ReplicaType = "Chief"
	ReplicaPS        ReplicaType = "PS"
	ReplicaEvaluator ReplicaType = "Evaluator"
	ReplicaLauncher  ReplicaType = "Launcher"
)

// FrameworkRoles returns the roles a framework accepts, the same sets
// Kubeflow's operators accept. A CEL rule on TrainingJobSpec repeats this
// table; TestValidationRules keeps the two in step.
func FrameworkRoles(f Framework) []ReplicaType {
	switch f {
	case FrameworkPyTorch, FrameworkXGBoost, FrameworkPaddle:
		return []ReplicaType{ReplicaMaster, ReplicaWorker}
	case FrameworkTensorFlow:
		return []ReplicaType{ReplicaChief, ReplicaMaster, ReplicaPS, ReplicaWorker, ReplicaEvaluator}
	case FrameworkMPI:
		return []ReplicaType{ReplicaLauncher, ReplicaWorker}
	case FrameworkJAX:
		return []ReplicaType{ReplicaWorker}
	}
	return nil
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

// DefaultRestartPolicy is the restart policy of a role that gives none:
// Kubeflow's per-framework default, so converted jobs keep their behaviour.
func DefaultRestartPolicy(f Framework, role ReplicaType) RestartPolicy {
	switch {
	case f == FrameworkPyTorch, f == FrameworkPaddle:
		return RestartOnFailure
	case f == FrameworkMPI && role == ReplicaLauncher:
		return RestartOnFailure
	}
	return RestartNever
}

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

	// BackoffLimit is how many restarts (status.restartCount) the job may
	// have before it fails. Unset: no limit.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// Suspend stops the job: no pods run while it is true, and pods that
	// run are deleted when it becomes true. It stays mutable. Defaults to
	// false.
	// +kubebuilder:default=false
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// SchedulingPolicy configures the job's PodGroup.
	// +optional
	SchedulingPolicy *SchedulingPolicy `json:"schedulingPolicy,omitempty"`
}

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

	// PriorityClass is the PriorityClass of the job's pods and PodGroup.
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

// ElasticPolicy is torchrun's elastic launch configuration (PyTorch only),
// injected as PET_* variables exactly as Kubeflow does.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas",fieldPath=`.minReplicas`
type ElasticPolicy struct {
	// MinReplicas is the fewest Workers the job runs with. Defaults to
	// maxReplicas, or to the Worker replicas when both are unset.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the most Workers the job runs with. Defaults to
	// minReplicas, or to the Worker replicas when both are unset.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// RDZVBackend is the rendezvous backend (PET_RDZV_BACKEND). Defaults to
	// c10d.
	// +optional
	RDZVBackend *RDZVBackend `json:"rdzvBackend,omitempty"`

	// RDZVPort is the rendezvous port. Defaults to Worker 0's pytorchjob-port
	// (23456 unless the template names another).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	RDZVPort *int32 `json:"rdzvPort,omitempty"`

	// RDZVHost is the rendezvous host. Defaults to Worker 0's address.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RDZVHost *string `json:"rdzvHost,omitempty"`

	// RDZVID is the rendezvous id (PET_RDZV_ID).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RDZVID *string `json:"rdzvId,omitempty"`

	// RDZVConf is extra rendezvous configuration, joined into PET_RDZV_CONF
	// as key=value pairs in order.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	RDZVConf []RDZVConf `json:"rdzvConf,omitempty"`

	// Standalone starts a local c10d rendezvous (PET_STANDALONE).
	// +optional
	Standalone *bool `json:"standalone,omitempty"`

	// MaxRestarts is how often torchrun restarts the worker group before it
	// fails (PET_MAX_RESTARTS).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}

// RDZVConf is one key=value of rendezvous configuration.
type RDZVConf struct {
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Value string `json:"value,omitempty"`
}

// RDZVBackend is a torchrun rendezvous backend.
//
// +kubebuilder:validation:Enum=c10d;etcd;etcd-v2
type RDZVBackend string

const (
	RDZVBackendC10D   RDZVBackend = "c10d"
	RDZVBackendETCD   RDZVBackend = "etcd"
	RDZVBackendETCDV2 RDZVBackend = "etcd-v2"
)

// MPIPolicy configures an MPI job, as MPIJob v2beta1 does.
type MPIPolicy struct {
	// SlotsPerWorker is the slots of each worker in the hostfile, usually
	// its GPUs. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	SlotsPerWorker *int32 `json:"slotsPerWorker,omitempty"`

	// SSHAuthMountPath is where the job's SSH key is mounted. Defaults to
	// /root/.ssh.
	// +kubebuilder:default="/root/.ssh"
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	SSHAuthMountPath string `json:"sshAuthMountPath,omitempty"`

	// Implementation is the MPI implementation, which decides the
	// launcher's environment and the hostfile format. Defaults to OpenMPI.
	// +kubebuilder:default=OpenMPI
	// +optional
	Implementation MPIImplementation `json:"implementation,omitempty"`

	// RunLauncherAsWorker lists the launcher in the hostfile too, so it runs
	// ranks as well. Defaults to false.
	// +kubebuilder:default=false
	// +optional
	RunLauncherAsWorker *bool `json:"runLauncherAsWorker,omitempty"`
}

// MPIImplementation is an MPI implementation.
//
// +kubebuilder:validation:Enum=OpenMPI;Intel;MPICH
type MPIImplementation string

const (
	MPIImplementationOpenMPI MPIImplementation = "OpenMPI"
	MPIImplementationIntel   MPIImplementation = "Intel"
	MPIImplementationMPICH   MPIImplementation = "MPICH"
)

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
}

// TopologyMode is how strict a topology constraint is.
//
// +kubebuilder:validation:Enum=Required;Preferred
type TopologyMode string

const (
	TopologyRequired  TopologyMode = "Required"
	TopologyPreferred TopologyMode = "Preferred"
)

// TrainingJobStatus is the observed state of a job.
type TrainingJobStatus struct {
	// Conditions are Created, Running, Restarting, Succeeded, Failed and
	// Suspended.
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
	// restarted; runPolicy.backoffLimit bounds it.
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`

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

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
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

// ReplicaStatus counts the pods of one role by phase.
type ReplicaStatus struct {
	// Active pods are pending or running.
	// +optional
	Active int32 `json:"active,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
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
}

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

// Default fills what the API server's schema defaults would (for objects
// built in Go: tests, the converter) and the defaults that depend on the
// framework, which a schema cannot express: restart policies and the
// elastic bounds. The controller calls it on its copy of every job, so
// behaviour never depends on whether a default was stored.
func (j *TrainingJob) Default() {
	s := &j.Spec
	for role, r := range s.ReplicaSpecs {
		if r.Replicas == nil {
			r.Replicas = ptr.To[int32](1)
		}
		if r.RestartPolicy == "" {
			r.RestartPolicy = DefaultRestartPolicy(s.Framework, role)
		}
		s.ReplicaSpecs[role] = r
	}
	if s.RunPolicy == nil {
		s.RunPolicy = &RunPolicy{}
	}
	if s.RunPolicy.CleanPodPolicy == nil {
		s.RunPolicy.CleanPodPolicy = ptr.To(CleanPodPolicyNone)
	}
	if s.RunPolicy.Suspend == nil {
		s.RunPolicy.Suspend = ptr.To(false)
	}
	if e := s.ElasticPolicy; e != nil {
		// Kubeflow's rule: a missing bound copies the other; with neither,
		// both are the Worker replicas.
		switch {
		case e.MinReplicas == nil && e.MaxReplicas == nil:
			if w, ok := s.ReplicaSpecs[ReplicaWorker]; ok {
				e.MinReplicas = ptr.To(w.DesiredReplicas())
				e.MaxReplicas = ptr.To(w.DesiredReplicas())
			}
		case e.MinReplicas == nil:
			e.MinReplicas = ptr.To(*e.MaxReplicas)
		case e.MaxReplicas == nil:
			e.MaxReplicas = ptr.To(*e.MinReplicas)
		}
		if e.RDZVBackend == nil {
			e.RDZVBackend = ptr.To(RDZVBackendC10D)
		}
	}
	if s.Framework == FrameworkMPI {
		if s.MPI == nil {
			s.MPI = &MPIPolicy{}
		}
		if s.MPI.SlotsPerWorker == nil {
			s.MPI.SlotsPerWorker = ptr.To[int32](1)
		}
		if s.MPI.SSHAuthMountPath == "" {
			s.MPI.SSHAuthMountPath = "/root/.ssh"
		}
		if s.MPI.Implementation == "" {
			s.MPI.Implementation = MPIImplementationOpenMPI
		}
		if s.MPI.RunLauncherAsWorker == nil {
			s.MPI.RunLauncherAsWorker = ptr.To(false)
		}
	}
	if s.Topology != nil && s.Topology.Mode == "" {
		s.Topology.Mode = TopologyPreferred
	}
}

// MaxNameLength is the longest TrainingJob name: the longest hostname,
// <name>-evaluator-9999, must fit in a 63-character DNS label.
const MaxNameLength = 47

var (
	jobNameFormat       = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	nprocPerNodePattern = regexp.MustCompile(`^(auto|cpu|gpu|[1-9][0-9]{0,4})$`)
	topologyLevelFormat = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Validate checks what the CRD's schema and CEL rules check on create, so
// Go callers (the converter, the controller, tests) get the same answers
// without an API server. Unset replicas count as 1, as after defaulting.
func (j *TrainingJob) Validate() field.ErrorList {
	var errs field.ErrorList
	if len(j.Name) > MaxNameLength || !jobNameFormat.MatchString(j.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), j.Name,
			"the name must be a DNS label of at most 47 characters starting with a letter: it names the job's Service, and pod hostnames <name>-<role>-<index> must fit in 63"))
	}
	s := &j.Spec
	specPath := field.NewPath("spec")
	rolesPath := specPath.Child("replicaSpecs")

	valid := FrameworkRoles(s.Framework)
	if valid == nil {
		errs = append(errs, field.NotSupported(specPath.Child("framework"), s.Framework,
			[]Framework{FrameworkPyTorch, FrameworkTensorFlow, FrameworkMPI, FrameworkJAX, FrameworkXGBoost, FrameworkPaddle}))
	}
	switch n := len(s.ReplicaSpecs); {
	case n == 0:
		errs = append(errs, field.Required(rolesPath, "give at least one role"))
	case n > 5:
		errs = append(errs, field.TooMany(rolesPath, n, 5))
	}
	for _, role := range sortedRoles(s.ReplicaSpecs) {
		r := s.ReplicaSpecs[role]
		p := rolesPath.Key(string(role))
		if valid != nil && !slices.Contains(valid, role) {
			errs = append(errs, field.NotSupported(p, role, valid))
		}
		if n := r.DesiredReplicas(); n < 0 || n > 10000 {
			errs = append(errs, field.Invalid(p.Child("replicas"), n, "must be between 0 and 10000"))
		}
		if (role == ReplicaMaster || role == ReplicaChief || role == ReplicaLauncher) &&
			s.Framework != FrameworkPaddle && r.DesiredReplicas() != 1 {
			errs = append(errs, field.Invalid(p.Child("replicas"), r.DesiredReplicas(), "Master, Chief and Launcher run exactly one replica"))
		}
		switch r.RestartPolicy {
		case "", RestartAlways, RestartOnFailure, RestartNever, RestartExitCode:
		default:
			errs = append(errs, field.NotSupported(p.Child("restartPolicy"), r.RestartPolicy,
				[]RestartPolicy{RestartAlways, RestartOnFailure, RestartNever, RestartExitCode}))
		}
		if len(r.Template.Spec.Containers) == 0 {
			errs = append(errs, field.Required(p.Child("template", "spec", "containers"), "give at least one container"))
		}
	}
	switch {
	case s.Framework == FrameworkPyTorch && s.ElasticPolicy == nil && !s.HasRole(ReplicaMaster):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaMaster)), "a PyTorch job needs a Master replica unless elasticPolicy is set"))
	case s.Framework == FrameworkXGBoost && !s.HasRole(ReplicaMaster):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaMaster)), "an XGBoost job needs a Master replica"))
	case s.Framework == FrameworkMPI && !s.HasRole(ReplicaLauncher):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaLauncher)), "an MPI job needs a Launcher replica"))
	}
	if s.HasRole(ReplicaChief) && s.HasRole(ReplicaMaster) {
		errs = append(errs, field.Invalid(rolesPath, "Chief, Master", "Chief and Master are the same role in TensorFlow; give one of them"))
	}

	errs = append(errs, s.RunPolicy.validate(specPath.Child("runPolicy"), s.TotalReplicas())...)

	if e := s.ElasticPolicy; e != nil {
		p := specPath.Child("elasticPolicy")
		if s.Framework != FrameworkPyTorch {
			errs = append(errs, field.Forbidden(p, "elasticPolicy applies to PyTorch jobs only"))
		}
		if e.MinReplicas != nil && e.MaxReplicas != nil && *e.MinReplicas > *e.MaxReplicas {
			errs = append(errs, field.Invalid(p.Child("minReplicas"), *e.MinReplicas, "minReplicas must not exceed maxReplicas"))
		}
		if v := e.MinReplicas; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("minReplicas"), *v, "must be at least 1"))
		}
		if v := e.MaxReplicas; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("maxReplicas"), *v, "must be at least 1"))
		}
		if w, ok := s.ReplicaSpecs[ReplicaWorker]; !ok {
			errs = append(errs, field.Required(rolesPath.Key(string(ReplicaWorker)), "an elastic job needs Workers"))
		} else if n := w.DesiredReplicas(); (e.MinReplicas != nil && n < *e.MinReplicas) || (e.MaxReplicas != nil && n > *e.MaxReplicas) {
			errs = append(errs, field.Invalid(rolesPath.Key(string(ReplicaWorker)).Child("replicas"), n,
				"an elastic job needs Worker replicas between elasticPolicy.minReplicas and elasticPolicy.maxReplicas"))
		}
		if e.RDZVPort != nil && (*e.RDZVPort < 1 || *e.RDZVPort > 65535) {
			errs = append(errs, field.Invalid(p.Child("rdzvPort"), *e.RDZVPort, "must be a port number, 1-65535"))
		}
		if e.RDZVBackend != nil && !slices.Contains([]RDZVBackend{RDZVBackendC10D, RDZVBackendETCD, RDZVBackendETCDV2}, *e.RDZVBackend) {
			errs = append(errs, field.NotSupported(p.Child("rdzvBackend"), *e.RDZVBackend, []RDZVBackend{RDZVBackendC10D, RDZVBackendETCD, RDZVBackendETCDV2}))
		}
		if e.MaxRestarts != nil && *e.MaxRestarts < 0 {
			errs = append(errs, field.Invalid(p.Child("maxRestarts"), *e.MaxRestarts, "must not be negative"))
		}
	}
	if s.NprocPerNode != nil {
		p := specPath.Child("nprocPerNode")
		if s.Framework != FrameworkPyTorch {
			errs = append(errs, field.Forbidden(p, "nprocPerNode applies to PyTorch jobs only"))
		}
		if !nprocPerNodePattern.MatchString(*s.NprocPerNode) {
			errs = append(errs, field.Invalid(p, *s.NprocPerNode, `must be "auto", "cpu", "gpu" or a positive integer`))
		}
	}
	if m := s.MPI; m != nil {
		p := specPath.Child("mpi")
		if s.Framework != FrameworkMPI {
			errs = append(errs, field.Forbidden(p, "mpi applies to MPI jobs only"))
		}
		if m.SlotsPerWorker != nil && *m.SlotsPerWorker < 1 {
			errs = append(errs, field.Invalid(p.Child("slotsPerWorker"), *m.SlotsPerWorker, "must be at least 1"))
		}
		switch m.Implementation {
		case "", MPIImplementationOpenMPI, MPIImplementationIntel, MPIImplementationMPICH:
		default:
			errs = append(errs, field.NotSupported(p.Child("implementation"), m.Implementation,
				[]MPIImplementation{MPIImplementationOpenMPI, MPIImplementationIntel, MPIImplementationMPICH}))
		}
	}
	switch s.SuccessPolicy {
	case "", SuccessPolicyDefault, SuccessPolicyAllWorkers:
	default:
		errs = append(errs, field.NotSupported(specPath.Child("successPolicy"), s.SuccessPolicy,
			[]SuccessPolicy{SuccessPolicyDefault, SuccessPolicyAllWorkers}))
	}
	if f := s.FailurePolicy; f != nil {
		p := specPath.Child("failurePolicy")
		switch f.Restart {
		case "", RestartScopePod, RestartScopeGang:
		default:
			errs = append(errs, field.NotSupported(p.Child("restart"), f.Restart, []RestartScope{RestartScopePod, RestartScopeGang}))
		}
		seen := map[int32]bool{}
		for i, c := range f.RetryableExitCodes {
			if c < 1 || c > 255 {
				errs = append(errs, field.Invalid(p.Child("retryableExitCodes").Index(i), c, "must be an exit code, 1-255"))
			}
			if seen[c] {
				errs = append(errs, field.Duplicate(p.Child("retryableExitCodes").Index(i), c))
			}
			seen[c] = true
		}
	}
	if t := s.Topology; t != nil {
		p := specPath.Child("topology")
		if len(t.Level) > 63 || !topologyLevelFormat.MatchString(t.Level) {
			errs = append(errs, field.Invalid(p.Child("level"), t.Level, "must be a level name: lower-case letters, digits and '-', at most 63"))
		}
		switch t.Mode {
		case "", TopologyRequired, TopologyPreferred:
		default:
			errs = append(errs, field.NotSupported(p.Child("mode"), t.Mode, []TopologyMode{TopologyRequired, TopologyPreferred}))
		}
	}
	return errs
}

func (r *RunPolicy) validate(p *field.Path, totalReplicas int32) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if r.CleanPodPolicy != nil {
		switch *r.CleanPodPolicy {
		case CleanPodPolicyAll, CleanPodPolicyRunning, CleanPodPolicyNone:
		default:
			errs = append(errs, field.NotSupported(p.Child("cleanPodPolicy"), *r.CleanPodPolicy,
				[]CleanPodPolicy{CleanPodPolicyAll, CleanPodPolicyRunning, CleanPodPolicyNone}))
		}
	}
	if v := r.TTLSecondsAfterFinished; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("ttlSecondsAfterFinished"), *v, "must not be negative"))
	}
	if v := r.ActiveDeadlineSeconds; v != nil && *v < 1 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *v, "must be at least 1"))
	}
	if v := r.BackoffLimit; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("backoffLimit"), *v, "must not be negative"))
	}
	if sp := r.SchedulingPolicy; sp != nil {
		p := p.Child("schedulingPolicy")
		if v := sp.MinAvailable; v != nil {
			if *v < 1 {
				errs = append(errs, field.Invalid(p.Child("minAvailable"), *v, "must be at least 1"))
			} else if *v > totalReplicas {
				errs = append(errs, field.Invalid(p.Child("minAvailable"), *v,
					fmt.Sprintf("must not exceed the total number of replicas (%d)", totalReplicas)))
			}
		}
		if v := sp.ScheduleTimeoutSeconds; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("scheduleTimeoutSeconds"), *v, "must be at least 1"))
		}
	}
	return errs
}

// ValidateUpdate checks the transition rules of the CRD: framework is
// immutable, and roles and templates are unless old was suspended.
func (j *TrainingJob) ValidateUpdate(old *TrainingJob) field.ErrorList {
	errs := j.Validate()
	specPath := field.NewPath("spec")
	if j.Spec.Framework != old.Spec.Framework {
		errs = append(errs, field.Invalid(specPath.Child("framework"), j.Spec.Framework, "framework is immutable"))
	}
	if old.Spec.IsSuspended() {
		return errs
	}
	same := len(j.Spec.ReplicaSpecs) == len(old.Spec.ReplicaSpecs)
	for role, r := range j.Spec.ReplicaSpecs {
		o, ok := old.Spec.ReplicaSpecs[role]
		// Semantic equality treats nil and empty collections alike, as the
		// wire format the CEL rule compares does.
		same = same && ok && equality.Semantic.DeepEqual(r.Template, o.Template)
	}
	if !same {
		errs = append(errs, field.Forbidden(specPath.Child("replicaSpecs"),
			"roles and pod templates are immutable unless the job is suspended (runPolicy.suspend)"))
	}
	return errs
}

func sortedRoles(m map[ReplicaType]ReplicaSpec) []ReplicaType {
	roles := make([]ReplicaType, 0, len(m))
	for r := range m {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	return roles
}
