package framework

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Kubeflow's TFJob defaults.
const (
	tensorflowContainer = "tensorflow"
	tensorflowPortName  = "tfjob-port"
	tensorflowPort      = 2222
)

// TensorFlow runs tf.distribute jobs: Chief (or Master), PS, Worker and
// Evaluator.
//
// Environment (training-operator pkg/controller.v1/tensorflow/tensorflow.go),
// on the main container only ("tensorflow", else the first), and only when
// the job has more than one pod:
//
//	TF_CONFIG={"cluster":{"<role>":["<address>:<port>",...],...},
//	           "task":{"type":"<role>","index":<i>},"environment":"cloud"}
//
// with roles in lower case, every role but the Evaluator (not part of the
// training cluster) in the cluster, and each role's tfjob-port (2222).
type TensorFlow struct{}

var _ Adapter = TensorFlow{}

func (TensorFlow) Framework() v1alpha1.Framework { return v1alpha1.FrameworkTensorFlow }

func (TensorFlow) Roles() []v1alpha1.ReplicaType {
	return []v1alpha1.ReplicaType{v1alpha1.ReplicaChief, v1alpha1.ReplicaMaster, v1alpha1.ReplicaPS, v1alpha1.ReplicaWorker, v1alpha1.ReplicaEvaluator}
}

// Rank is the task's place among the collective's tasks, as
// MultiWorkerMirroredStrategy numbers them from TF_CONFIG: the Chief (or
// Master) first, then Worker i. Parameter servers and the Evaluator are no
// ranks, nor is the pod of a one-pod job, which gets no TF_CONFIG.
func (TensorFlow) Rank(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	if job.Spec.TotalReplicas() == 1 {
		return 0, false
	}
	switch role {
	case v1alpha1.ReplicaChief, v1alpha1.ReplicaMaster:
		return index, true
	case v1alpha1.ReplicaWorker:
		return index + replicasOf(job, v1alpha1.ReplicaChief) + replicasOf(job, v1alpha1.ReplicaMaster), true
	}
	return 0, false
}

// DefaultRestartScope is Pod: parameter-server training tolerates a worker
// coming back on its own.
func (TensorFlow) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopePod }

func (t TensorFlow) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(TensorFlow{}, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	ensurePort(&pod.Spec, tensorflowContainer, tensorflowPortName, tensorflowPort)
	// A single pod trains locally; TF_CONFIG would make it wait for a
	// cluster (Kubeflow's isDistributed).
	if job.Spec.TotalReplicas() == 1 {
		return pod, nil
	}
	config, err := t.tfConfig(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	setEnv(&pod.Spec.Containers[mainContainer(&pod.Spec, tensorflowContainer)], env("TF_CONFIG", config))
	return pod, nil
}

type tfConfig struct {
	Cluster     map[string][]string `json:"cluster"`
	Task        tfTask              `json:"task"`
	Environment string              `json:"environment"`
}

type tfTask struct {
	Type  string `json:"type"`
	Index int32  `json:"index"`
}

func (t TensorFlow) tfConfig(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index, inc int32) (string, error) {
	cluster := map[string][]string{}
	for _, r := range t.Roles() {
		if r == v1alpha1.ReplicaEvaluator || !job.Spec.HasRole(r) {
			continue
		}
		port := rolePort(job, r, tensorflowContainer, tensorflowPortName, tensorflowPort)
		n := replicasOf(job, r)
		hosts := make([]string, 0, n)
		for i := range n {
			hosts = append(hosts, fmt.Sprintf("%s:%d", PodAddress(job, r, i, inc), port))
		}
		cluster[strings.ToLower(string(r))] = hosts
	}
	data, err := json.Marshal(tfConfig{
		Cluster:     cluster,
		Task:        tfTask{Type: strings.ToLower(string(role)), Index: index},
		Environment: "cloud",
	})
	if err != nil {
		return "", fmt.Errorf("encoding TF_CONFIG of %s/%s: %w", job.Namespace, job.Name, err)
	}
	return string(data), nil
}

func (TensorFlow) AuxObjects(*v1alpha1.TrainingJob) ([]AuxObject, error) { return nil, nil }

// Outcome: the Chief (or Master) decides; without one, Worker 0 (TensorFlow's
// implicit chief), or every Worker under successPolicy AllWorkers.
func (t TensorFlow) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	var rule successRule
	switch {
	case job.Spec.HasRole(v1alpha1.ReplicaChief):
		rule = allSucceeded(job, v1alpha1.ReplicaChief)
	case job.Spec.HasRole(v1alpha1.ReplicaMaster):
		rule = allSucceeded(job, v1alpha1.ReplicaMaster)
	default:
		rule = workersRule(job, indexSucceeded(v1alpha1.ReplicaWorker, 0))
	}
	return decide(t.Roles(), pods, rule)
}
