package v1alpha1

import autoscalingv2 "k8s.io/api/autoscaling/v2"

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

// Frameworks are the frameworks a job may name, in the Enum's order.
var Frameworks = []Framework{FrameworkPyTorch, FrameworkTensorFlow, FrameworkMPI, FrameworkJAX, FrameworkXGBoost, FrameworkPaddle}

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

	// Metrics, when set, make the controller keep a HorizontalPodAutoscaler
	// (autoscaling/v2, named after the job) that scales the Worker replicas
	// through the job's /scale subresource between minReplicas and
	// maxReplicas on these metrics, as Kubeflow's PyTorchJob does. The
	// scheduler plans each resize's new Workers beside the running ones.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Metrics []autoscalingv2.MetricSpec `json:"metrics,omitempty"`
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
