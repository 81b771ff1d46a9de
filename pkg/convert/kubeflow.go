package convert

import (
	"encoding/json"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Kubeflow objects the converter reads, field for field as Kubeflow's
// CRDs define them (training-operator kubeflow.org/v1, mpi-operator
// kubeflow.org/v2beta1). Strict decoding into these types is the
// whitelist: a field they do not name is refused as unknown, and every
// field they do name is either mapped or refused by the converter, so
// nothing is dropped silently. Fields with no TrainingJob equivalent are
// typed json.RawMessage: they are only ever checked for presence.

// kfObject is one Kubeflow job of any kind.
type kfObject[Spec any] struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       Spec              `json:"spec"`
	// Status is what the operator observed; it is not carried over.
	Status json.RawMessage `json:"status,omitempty"`
}

type kfRunPolicy struct {
	CleanPodPolicy          *string             `json:"cleanPodPolicy,omitempty"`
	TTLSecondsAfterFinished *int32              `json:"ttlSecondsAfterFinished,omitempty"`
	ActiveDeadlineSeconds   *int64              `json:"activeDeadlineSeconds,omitempty"`
	BackoffLimit            *int32              `json:"backoffLimit,omitempty"`
	SchedulingPolicy        *kfSchedulingPolicy `json:"schedulingPolicy,omitempty"`
	Suspend                 *bool               `json:"suspend,omitempty"`
	ManagedBy               *string             `json:"managedBy,omitempty"`
}

type kfSchedulingPolicy struct {
	MinAvailable           *int32          `json:"minAvailable,omitempty"`
	Queue                  string          `json:"queue,omitempty"`
	MinResources           json.RawMessage `json:"minResources,omitempty"`
	PriorityClass          string          `json:"priorityClass,omitempty"`
	ScheduleTimeoutSeconds *int32          `json:"scheduleTimeoutSeconds,omitempty"`
}

type kfReplicaSpec struct {
	Replicas      *int32                 `json:"replicas,omitempty"`
	Template      corev1.PodTemplateSpec `json:"template"`
	RestartPolicy string                 `json:"restartPolicy,omitempty"`
}

type kfReplicaSpecs map[string]*kfReplicaSpec

type pytorchJobSpec struct {
	RunPolicy           *kfRunPolicy     `json:"runPolicy,omitempty"`
	ElasticPolicy       *kfElasticPolicy `json:"elasticPolicy,omitempty"`
	PyTorchReplicaSpecs kfReplicaSpecs   `json:"pytorchReplicaSpecs"`
	NprocPerNode        *string          `json:"nprocPerNode,omitempty"`
}

type kfElasticPolicy struct {
	MinReplicas *int32      `json:"minReplicas,omitempty"`
	MaxReplicas *int32      `json:"maxReplicas,omitempty"`
	RDZVBackend *string     `json:"rdzvBackend,omitempty"`
	RDZVPort    *int32      `json:"rdzvPort,omitempty"`
	RDZVHost    *string     `json:"rdzvHost,omitempty"`
	RDZVID      *string     `json:"rdzvId,omitempty"`
	RDZVConf    []kfRDZVKey `json:"rdzvConf,omitempty"`
	Standalone  *bool       `json:"standalone,omitempty"`
	// NProcPerNode is the deprecated integer predecessor of the spec's
	// nprocPerNode.
	NProcPerNode *int32                     `json:"nProcPerNode,omitempty"`
	MaxRestarts  *int32                     `json:"maxRestarts,omitempty"`
	Metrics      []autoscalingv2.MetricSpec `json:"metrics,omitempty"`
}

type kfRDZVKey struct {
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
}

type tfJobSpec struct {
	RunPolicy           *kfRunPolicy   `json:"runPolicy,omitempty"`
	SuccessPolicy       *string        `json:"successPolicy,omitempty"`
	TFReplicaSpecs      kfReplicaSpecs `json:"tfReplicaSpecs"`
	EnableDynamicWorker *bool          `json:"enableDynamicWorker,omitempty"`
}

type xgboostJobSpec struct {
	RunPolicy       *kfRunPolicy   `json:"runPolicy,omitempty"`
	XGBReplicaSpecs kfReplicaSpecs `json:"xgbReplicaSpecs"`
}

type paddleJobSpec struct {
	RunPolicy          *kfRunPolicy    `json:"runPolicy,omitempty"`
	ElasticPolicy      json.RawMessage `json:"elasticPolicy,omitempty"`
	PaddleReplicaSpecs kfReplicaSpecs  `json:"paddleReplicaSpecs"`
}

type jaxJobSpec struct {
	RunPolicy       *kfRunPolicy   `json:"runPolicy,omitempty"`
	JAXReplicaSpecs kfReplicaSpecs `json:"jaxReplicaSpecs"`
}

type mpiJobSpec struct {
	SlotsPerWorker         *int32         `json:"slotsPerWorker,omitempty"`
	RunLauncherAsWorker    *bool          `json:"runLauncherAsWorker,omitempty"`
	RunPolicy              *kfRunPolicy   `json:"runPolicy,omitempty"`
	MPIReplicaSpecs        kfReplicaSpecs `json:"mpiReplicaSpecs"`
	SSHAuthMountPath       *string        `json:"sshAuthMountPath,omitempty"`
	LauncherCreationPolicy *string        `json:"launcherCreationPolicy,omitempty"`
	MPIImplementation      *string        `json:"mpiImplementation,omitempty"`
}

// mpiJobV1Spec is the training-operator's MPIJob (kubeflow.org/v1).
type mpiJobV1Spec struct {
	SlotsPerWorker *int32 `json:"slotsPerWorker,omitempty"`
	// CleanPodPolicy is deprecated there in favour of runPolicy's.
	CleanPodPolicy  *string        `json:"cleanPodPolicy,omitempty"`
	MPIReplicaSpecs kfReplicaSpecs `json:"mpiReplicaSpecs"`
	MainContainer   string         `json:"mainContainer,omitempty"`
	RunPolicy       *kfRunPolicy   `json:"runPolicy,omitempty"`
}

// Each kind's spec names its replica specs differently (kfSpec).
func (s pytorchJobSpec) replicaSpecs() kfReplicaSpecs { return s.PyTorchReplicaSpecs }
func (s pytorchJobSpec) runPolicy() *kfRunPolicy      { return s.RunPolicy }
func (s tfJobSpec) replicaSpecs() kfReplicaSpecs      { return s.TFReplicaSpecs }
func (s tfJobSpec) runPolicy() *kfRunPolicy           { return s.RunPolicy }
func (s xgboostJobSpec) replicaSpecs() kfReplicaSpecs { return s.XGBReplicaSpecs }
func (s xgboostJobSpec) runPolicy() *kfRunPolicy      { return s.RunPolicy }
func (s paddleJobSpec) replicaSpecs() kfReplicaSpecs  { return s.PaddleReplicaSpecs }
func (s paddleJobSpec) runPolicy() *kfRunPolicy       { return s.RunPolicy }
func (s jaxJobSpec) replicaSpecs() kfReplicaSpecs     { return s.JAXReplicaSpecs }
func (s jaxJobSpec) runPolicy() *kfRunPolicy          { return s.RunPolicy }
func (s mpiJobSpec) replicaSpecs() kfReplicaSpecs     { return s.MPIReplicaSpecs }
func (s mpiJobSpec) runPolicy() *kfRunPolicy          { return s.RunPolicy }
func (s mpiJobV1Spec) replicaSpecs() kfReplicaSpecs   { return s.MPIReplicaSpecs }
func (s mpiJobV1Spec) runPolicy() *kfRunPolicy        { return s.RunPolicy }
func (s mpiJobV1Spec) cleanPodPolicy() *string        { return s.CleanPodPolicy }
