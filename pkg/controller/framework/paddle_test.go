package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestPaddleEnv(t *testing.T) {
	podIP := corev1.EnvVar{Name: "POD_IP_DUMMY", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
	}}
	collective := makeJob(v1alpha1.FrameworkPaddle).Role(v1alpha1.ReplicaWorker, 3, tpl("paddle"))
	parameterServer := makeJob(v1alpha1.FrameworkPaddle).
		Role(v1alpha1.ReplicaMaster, 2, tpl("paddle")).
		Role(v1alpha1.ReplicaWorker, 2, tpl("paddle"))
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		role  v1alpha1.ReplicaType
		index int32
		want  []corev1.EnvVar
	}{
		{
			name: "collective: worker 0 is the endpoint", job: collective.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 0,
			want: append(append(vars(
				"PYTHONUNBUFFERED", "1",
				"PADDLE_JOB_ID", "train",
				"PADDLE_NNODES", "3",
			), podIP), vars("PADDLE_MASTER", "$(POD_IP_DUMMY):36543")...),
		},
		{
			name: "collective: worker 2", job: collective.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 2,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PADDLE_JOB_ID", "train",
				"PADDLE_NNODES", "3",
				"PADDLE_MASTER", "train-worker-0:36543",
			),
		},
		{
			name: "parameter server: master 0 is the endpoint", job: parameterServer.DefaultedObj(), role: v1alpha1.ReplicaMaster, index: 0,
			want: append(append(vars(
				"PYTHONUNBUFFERED", "1",
				"PADDLE_JOB_ID", "train",
				"PADDLE_NNODES", "4",
			), podIP), vars("PADDLE_MASTER", "$(POD_IP_DUMMY):36543", "PADDLE_SERVER_NUM", "1")...),
		},
		{
			name: "parameter server: master 1", job: parameterServer.DefaultedObj(), role: v1alpha1.ReplicaMaster, index: 1,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PADDLE_JOB_ID", "train",
				"PADDLE_NNODES", "4",
				"PADDLE_MASTER", "train-master-0:36543",
				"PADDLE_SERVER_NUM", "1",
			),
		},
		{
			name: "parameter server: worker 0 is a trainer", job: parameterServer.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PADDLE_JOB_ID", "train",
				"PADDLE_NNODES", "4",
				"PADDLE_MASTER", "train-master-0:36543",
				"PADDLE_TRAINER_NUM", "1",
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podTemplate(t, Paddle{}, tc.job, tc.role, tc.index)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}
