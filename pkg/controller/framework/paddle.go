package framework

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Kubeflow's PaddleJob defaults.
const (
	paddleContainer = "paddle"
	paddlePortName  = "master"
	paddlePort      = 36543
)

// Paddle runs PaddlePaddle jobs: collective (Workers only) or parameter
// server (Master pods are the servers, Workers the trainers).
//
// Environment, on every container (training-operator
// pkg/controller.v1/paddlepaddle/envvar.go):
//
//	PYTHONUNBUFFERED=1
//	PADDLE_JOB_ID       the job's name (-r<incarnation> after a gang restart)
//	PADDLE_NNODES       pods
//	PADDLE_MASTER       the rendezvous endpoint <address>:<port>: Worker 0
//	                    (collective) or Master 0 (parameter server) and its
//	                    "master" port (36543); that pod itself gets
//	                    POD_IP_DUMMY from status.podIP and
//	                    PADDLE_MASTER=$(POD_IP_DUMMY):<port>
//	parameter server only:
//	PADDLE_SERVER_NUM=1 on Masters, PADDLE_TRAINER_NUM=1 on Workers
type Paddle struct{}

var _ Adapter = Paddle{}

func (Paddle) Framework() v1alpha1.Framework { return v1alpha1.FrameworkPaddle }

func (Paddle) Roles() []v1alpha1.ReplicaType {
	return []v1alpha1.ReplicaType{v1alpha1.ReplicaMaster, v1alpha1.ReplicaWorker}
}

// Rank: Worker i → i, the trainers of the collective (Worker 0 is the
// rendezvous endpoint of a collective job); parameter servers (Masters) are
// no ranks. paddle.distributed.launch numbers trainers itself at
// rendezvous, so this is the order Lockstep places them in, which launch
// may or may not keep.
func (Paddle) Rank(_ *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	return index, role == v1alpha1.ReplicaWorker
}

// DefaultRestartScope is Pod, as in Kubeflow: paddle.distributed.launch
// handles a trainer coming back.
func (Paddle) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopePod }

func (Paddle) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(Paddle{}, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	ensurePort(&pod.Spec, paddleContainer, paddlePortName, paddlePort)
	parameterServer := job.Spec.HasRole(v1alpha1.ReplicaMaster)
	endpoint := v1alpha1.ReplicaWorker
	if parameterServer {
		endpoint = v1alpha1.ReplicaMaster
	}
	port := itoa(rolePort(job, endpoint, paddleContainer, paddlePortName, paddlePort))

	vars := []corev1.EnvVar{
		env("PYTHONUNBUFFERED", "1"),
		env("PADDLE_JOB_ID", paddleJobID(job, inc)),
		env("PADDLE_NNODES", itoa(job.Spec.TotalReplicas())),
	}
	if role == endpoint && index == 0 {
		// The endpoint pod listens on its own IP: its DNS name may not
		// resolve yet when it starts.
		vars = append(vars,
			corev1.EnvVar{Name: "POD_IP_DUMMY", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
			}},
			env("PADDLE_MASTER", "$(POD_IP_DUMMY):"+port),
		)
	} else {
		vars = append(vars, env("PADDLE_MASTER", PodHost(job, endpoint, 0, inc)+":"+port))
	}
	if parameterServer {
		if role == v1alpha1.ReplicaMaster {
			vars = append(vars, env("PADDLE_SERVER_NUM", "1"))
		} else {
			vars = append(vars, env("PADDLE_TRAINER_NUM", "1"))
		}
	}
	setEnvAll(&pod.Spec, vars...)
	return pod, nil
}

func (Paddle) AuxObjects(*v1alpha1.TrainingJob) ([]AuxObject, error) { return nil, nil }

// Outcome: the Master decides when there is one, else every Worker.
func (p Paddle) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	rule := workersRule(job, allSucceeded(job, v1alpha1.ReplicaWorker))
	if job.Spec.HasRole(v1alpha1.ReplicaMaster) {
		rule = allSucceeded(job, v1alpha1.ReplicaMaster)
	}
	return decide(p.Roles(), pods, rule)
}

// paddleJobID is PADDLE_JOB_ID: the job's name, as in Kubeflow, and under a
// gang restart scope -r<inc> after a restart, so that launchers of an
// earlier incarnation never meet the new one's at the master.
func paddleJobID(job *v1alpha1.TrainingJob, inc int32) string {
	if inc > 0 {
		return job.Name + "-r" + itoa(inc)
	}
	return job.Name
}
