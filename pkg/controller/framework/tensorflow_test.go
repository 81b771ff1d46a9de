package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestTensorFlowEnv(t *testing.T) {
	ps := makeJob(v1alpha1.FrameworkTensorFlow).
		Role(v1alpha1.ReplicaChief, 1, tpl("tensorflow")).
		Role(v1alpha1.ReplicaPS, 2, tpl("tensorflow")).Port(v1alpha1.ReplicaPS, "tfjob-port", 2223).
		Role(v1alpha1.ReplicaWorker, 2, tpl("tensorflow")).
		Role(v1alpha1.ReplicaEvaluator, 1, tpl("tensorflow"))
	const cluster = `{"chief":["train-chief-0.train.ml.svc:2222"],` +
		`"ps":["train-ps-0.train.ml.svc:2223","train-ps-1.train.ml.svc:2223"],` +
		`"worker":["train-worker-0.train.ml.svc:2222","train-worker-1.train.ml.svc:2222"]}`
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		role  v1alpha1.ReplicaType
		index int32
		want  []corev1.EnvVar
	}{
		{
			name: "worker", job: ps.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 1,
			want: vars("TF_CONFIG", `{"cluster":`+cluster+`,"task":{"type":"worker","index":1},"environment":"cloud"}`),
		},
		{
			name: "parameter server", job: ps.DefaultedObj(), role: v1alpha1.ReplicaPS, index: 0,
			want: vars("TF_CONFIG", `{"cluster":`+cluster+`,"task":{"type":"ps","index":0},"environment":"cloud"}`),
		},
		{
			name: "evaluator is outside the cluster but knows it", job: ps.DefaultedObj(), role: v1alpha1.ReplicaEvaluator, index: 0,
			want: vars("TF_CONFIG", `{"cluster":`+cluster+`,"task":{"type":"evaluator","index":0},"environment":"cloud"}`),
		},
		{
			name: "multi-worker mirrored",
			job:  makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaWorker, 2, tpl("tensorflow")).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars("TF_CONFIG", `{"cluster":{"worker":["train-worker-0.train.ml.svc:2222","train-worker-1.train.ml.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}`),
		},
		{
			name: "one pod trains locally",
			job:  makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaWorker, 1, tpl("tensorflow")).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podTemplate(t, TensorFlow{}, tc.job, tc.role, tc.index)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}

// TF_CONFIG goes to the tensorflow container only, as in Kubeflow.
func TestTensorFlowMainContainerOnly(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkTensorFlow).
		Role(v1alpha1.ReplicaWorker, 2, tpl("log-shipper")).
		Container(v1alpha1.ReplicaWorker, corev1.Container{Name: "tensorflow", Image: "registry.example/tf:v1"}).DefaultedObj()
	pod := podTemplate(t, TensorFlow{}, job, v1alpha1.ReplicaWorker, 0)
	if n := len(pod.Spec.Containers[0].Env); n != 0 {
		t.Errorf("sidecar got %d variables, want none", n)
	}
	if c := pod.Spec.Containers[1]; len(c.Env) != 1 || c.Env[0].Name != "TF_CONFIG" {
		t.Errorf("tensorflow container env %v, want TF_CONFIG", c.Env)
	}
	want := []corev1.ContainerPort{{Name: "tfjob-port", ContainerPort: 2222, Protocol: corev1.ProtocolTCP}}
	if diff := cmp.Diff(want, pod.Spec.Containers[1].Ports); diff != "" {
		t.Errorf("ports (-want,+got):\n%s", diff)
	}
}
