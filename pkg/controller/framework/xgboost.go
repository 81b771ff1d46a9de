package framework

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Kubeflow's XGBoostJob defaults.
const (
	xgboostContainer = "xgboost"
	xgboostPortName  = "xgboostjob-port"
	xgboostPort      = 9999
)

// XGBoost runs XGBoost (Rabit tracker on the Master) and LightGBM jobs.
//
// Environment, on every container (training-operator
// pkg/controller.v1/xgboost/xgboost.go):
//
//	MASTER_PORT       the Master's xgboostjob-port (9999)
//	MASTER_ADDR       the Master's address
//	WORLD_SIZE        pods
//	RANK              Master 0, Worker i → i + Master replicas
//	PYTHONUNBUFFERED  "0": Kubeflow's value here; Python unbuffers on any
//	                  non-empty value, so it means the same as "1"
//	with more than one pod, for LightGBM:
//	WORKER_PORT       the Worker's xgboostjob-port
//	WORKER_ADDRS      the addresses of Workers 0 .. pods-2, comma-separated
//	                  (Kubeflow's count: one Master assumed)
type XGBoost struct{}

var _ Adapter = XGBoost{}

func (XGBoost) Framework() v1alpha1.Framework { return v1alpha1.FrameworkXGBoost }

func (XGBoost) Roles() []v1alpha1.ReplicaType {
	return []v1alpha1.ReplicaType{v1alpha1.ReplicaMaster, v1alpha1.ReplicaWorker}
}

// Rank is RANK: Master i → i, Worker i → i + Master replicas.
func (XGBoost) Rank(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	switch role {
	case v1alpha1.ReplicaMaster:
		return index, true
	case v1alpha1.ReplicaWorker:
		return index + replicasOf(job, v1alpha1.ReplicaMaster), true
	}
	return 0, false
}

// DefaultRestartScope is Pod: Rabit lets a worker rejoin.
func (XGBoost) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopePod }

func (XGBoost) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(XGBoost{}, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	ensurePort(&pod.Spec, xgboostContainer, xgboostPortName, xgboostPort)
	total := job.Spec.TotalReplicas()
	rank, _ := XGBoost{}.Rank(job, role, index)
	vars := []corev1.EnvVar{
		env("MASTER_PORT", itoa(rolePort(job, v1alpha1.ReplicaMaster, xgboostContainer, xgboostPortName, xgboostPort))),
		env("MASTER_ADDR", PodHost(job, v1alpha1.ReplicaMaster, 0, inc)),
		env("WORLD_SIZE", itoa(total)),
		env("RANK", itoa(rank)),
		env("PYTHONUNBUFFERED", "0"),
	}
	if total > 1 {
		addrs := make([]string, total-1)
		for i := range addrs {
			addrs[i] = PodHost(job, v1alpha1.ReplicaWorker, int32(i), inc)
		}
		vars = append(vars,
			env("WORKER_PORT", itoa(rolePort(job, v1alpha1.ReplicaWorker, xgboostContainer, xgboostPortName, xgboostPort))),
			env("WORKER_ADDRS", strings.Join(addrs, ",")),
		)
	}
	setEnvAll(&pod.Spec, vars...)
	return pod, nil
}

func (XGBoost) AuxObjects(*v1alpha1.TrainingJob) ([]AuxObject, error) { return nil, nil }

// Outcome: the Master decides.
func (x XGBoost) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	return decide(x.Roles(), pods, allSucceeded(job, v1alpha1.ReplicaMaster))
}
