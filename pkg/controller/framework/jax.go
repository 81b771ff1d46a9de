package framework

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Kubeflow's JAXJob defaults.
const (
	jaxContainer = "jax"
	jaxPortName  = "jaxjob-port"
	jaxPort      = 6666
)

// JAX runs jax.distributed jobs: Workers, the first of which hosts the
// coordinator.
//
// Environment, on every container (training-operator
// pkg/controller.v1/jax/envvar.go):
//
//	PYTHONUNBUFFERED=1
//	COORDINATOR_PORT     Worker's jaxjob-port (6666)
//	COORDINATOR_ADDRESS  Worker 0's address (host only, as in Kubeflow)
//	NUM_PROCESSES        pods
//	PROCESS_ID           the pod's index
type JAX struct{}

var _ Adapter = JAX{}

func (JAX) Framework() v1alpha1.Framework { return v1alpha1.FrameworkJAX }

func (JAX) Roles() []v1alpha1.ReplicaType { return []v1alpha1.ReplicaType{v1alpha1.ReplicaWorker} }

// Rank is PROCESS_ID: Worker i → i; Worker 0 hosts the coordinator.
func (JAX) Rank(_ *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	return index, role == v1alpha1.ReplicaWorker
}

// DefaultRestartScope is Gang: jax.distributed cannot rejoin a process.
func (JAX) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopeGang }

func (JAX) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(JAX{}, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	ensurePort(&pod.Spec, jaxContainer, jaxPortName, jaxPort)
	setEnvAll(&pod.Spec,
		env("PYTHONUNBUFFERED", "1"),
		env("COORDINATOR_PORT", itoa(rolePort(job, v1alpha1.ReplicaWorker, jaxContainer, jaxPortName, jaxPort))),
		env("COORDINATOR_ADDRESS", PodHost(job, v1alpha1.ReplicaWorker, 0, inc)),
		env("NUM_PROCESSES", itoa(job.Spec.TotalReplicas())),
		env("PROCESS_ID", itoa(index)),
	)
	return pod, nil
}

func (JAX) AuxObjects(*v1alpha1.TrainingJob) ([]AuxObject, error) { return nil, nil }

// Outcome: every Worker must succeed.
func (j JAX) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	return decide(j.Roles(), pods, allSucceeded(job, v1alpha1.ReplicaWorker))
}
