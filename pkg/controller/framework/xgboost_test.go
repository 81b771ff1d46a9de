package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestXGBoostEnv(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkXGBoost).
		Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).
		Role(v1alpha1.ReplicaWorker, 2, tpl("xgboost")).Port(v1alpha1.ReplicaWorker, "xgboostjob-port", 9000)
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		role  v1alpha1.ReplicaType
		index int32
		want  []corev1.EnvVar
	}{
		{
			name: "master", job: job.DefaultedObj(), role: v1alpha1.ReplicaMaster, index: 0,
			want: vars(
				"MASTER_PORT", "9999",
				"MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"RANK", "0",
				"PYTHONUNBUFFERED", "0",
				"WORKER_PORT", "9000",
				"WORKER_ADDRS", "train-worker-0,train-worker-1",
			),
		},
		{
			name: "worker 1 ranks after the master", job: job.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 1,
			want: vars(
				"MASTER_PORT", "9999",
				"MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"RANK", "2",
				"PYTHONUNBUFFERED", "0",
				"WORKER_PORT", "9000",
				"WORKER_ADDRS", "train-worker-0,train-worker-1",
			),
		},
		{
			name: "master alone", job: makeJob(v1alpha1.FrameworkXGBoost).Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).DefaultedObj(),
			role: v1alpha1.ReplicaMaster, index: 0,
			want: vars(
				"MASTER_PORT", "9999",
				"MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "1",
				"RANK", "0",
				"PYTHONUNBUFFERED", "0",
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podTemplate(t, XGBoost{}, tc.job, tc.role, tc.index)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}
