package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestJAXEnv(t *testing.T) {
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		index int32
		want  []corev1.EnvVar
	}{
		{
			name:  "worker 0 hosts the coordinator",
			job:   makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 4, tpl("jax")).DefaultedObj(),
			index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"COORDINATOR_PORT", "6666",
				"COORDINATOR_ADDRESS", "train-worker-0",
				"NUM_PROCESSES", "4",
				"PROCESS_ID", "0",
			),
		},
		{
			name:  "worker 3 with a named port",
			job:   makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 4, tpl("jax")).Port(v1alpha1.ReplicaWorker, "jaxjob-port", 1234).DefaultedObj(),
			index: 3,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"COORDINATOR_PORT", "1234",
				"COORDINATOR_ADDRESS", "train-worker-0",
				"NUM_PROCESSES", "4",
				"PROCESS_ID", "3",
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podTemplate(t, JAX{}, tc.job, v1alpha1.ReplicaWorker, tc.index)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}
