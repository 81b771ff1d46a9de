package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestPyTorchEnv(t *testing.T) {
	ddp := makeJob(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).
		Role(v1alpha1.ReplicaWorker, 2, tpl("pytorch"))
	elastic := makeJob(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaWorker, 4, tpl("pytorch")).
		ElasticPolicy(v1alpha1.ElasticPolicy{
			MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](4),
			RDZVBackend: ptr.To(v1alpha1.RDZVBackendC10D), MaxRestarts: ptr.To[int32](100),
		})
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		role  v1alpha1.ReplicaType
		index int32
		want  []corev1.EnvVar
	}{
		{
			name: "master", job: ddp.DefaultedObj(), role: v1alpha1.ReplicaMaster, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "23456",
				"PET_MASTER_PORT", "23456",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"RANK", "0",
				"PET_NPROC_PER_NODE", "auto",
				"PET_NODE_RANK", "0",
				"PET_NNODES", "3",
			),
		},
		{
			name: "worker 1 ranks after the master", job: ddp.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 1,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "23456",
				"PET_MASTER_PORT", "23456",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"RANK", "2",
				"PET_NPROC_PER_NODE", "auto",
				"PET_NODE_RANK", "2",
				"PET_NNODES", "3",
			),
		},
		{
			name: "nprocPerNode 8 multiplies WORLD_SIZE, not PET_NNODES",
			job:  ddp.Clone().With(func(j *v1alpha1.TrainingJob) { j.Spec.NprocPerNode = ptr.To("8") }).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "23456",
				"PET_MASTER_PORT", "23456",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "24",
				"RANK", "1",
				"PET_NPROC_PER_NODE", "8",
				"PET_NODE_RANK", "1",
				"PET_NNODES", "3",
			),
		},
		{
			name: "nprocPerNode gpu counts one per pod",
			job:  ddp.Clone().With(func(j *v1alpha1.TrainingJob) { j.Spec.NprocPerNode = ptr.To("gpu") }).DefaultedObj(),
			role: v1alpha1.ReplicaMaster, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "23456",
				"PET_MASTER_PORT", "23456",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"RANK", "0",
				"PET_NPROC_PER_NODE", "gpu",
				"PET_NODE_RANK", "0",
				"PET_NNODES", "3",
			),
		},
		{
			name: "the master's named port",
			job: makeJob(v1alpha1.FrameworkPyTorch).
				Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).Port(v1alpha1.ReplicaMaster, "pytorchjob-port", 29500).
				Role(v1alpha1.ReplicaWorker, 1, tpl("pytorch")).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "29500",
				"PET_MASTER_PORT", "29500",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "2",
				"RANK", "1",
				"PET_NPROC_PER_NODE", "auto",
				"PET_NODE_RANK", "1",
				"PET_NNODES", "2",
			),
		},
		{
			name: "elastic", job: elastic.DefaultedObj(), role: v1alpha1.ReplicaWorker, index: 3,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PET_RDZV_ENDPOINT", "train-worker-0:23456",
				"PET_RDZV_BACKEND", "c10d",
				"PET_NNODES", "2:4",
				"PET_MAX_RESTARTS", "100",
				"PET_RDZV_ID", "train",
			),
		},
		{
			name: "elastic with every knob",
			job: elastic.Clone().With(func(j *v1alpha1.TrainingJob) {
				j.Spec.NprocPerNode = ptr.To("8")
				j.Spec.ElasticPolicy.RDZVHost = ptr.To("etcd.infra.svc")
				j.Spec.ElasticPolicy.RDZVPort = ptr.To[int32](2379)
				j.Spec.ElasticPolicy.RDZVBackend = ptr.To(v1alpha1.RDZVBackendETCDV2)
				j.Spec.ElasticPolicy.RDZVID = ptr.To("run-7")
				j.Spec.ElasticPolicy.RDZVConf = []v1alpha1.RDZVConf{{Key: "timeout", Value: "900"}, {Key: "read_timeout", Value: "60"}}
				j.Spec.ElasticPolicy.Standalone = ptr.To(true)
			}).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PET_RDZV_ENDPOINT", "etcd.infra.svc:2379",
				"PET_RDZV_BACKEND", "etcd-v2",
				"PET_NNODES", "2:4",
				"PET_MAX_RESTARTS", "100",
				"PET_NPROC_PER_NODE", "8",
				"PET_RDZV_ID", "run-7",
				"PET_RDZV_CONF", "timeout=900,read_timeout=60",
				"PET_STANDALONE", "",
			),
		},
		{
			name: "elastic bounds default to the workers",
			job: makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).
				ElasticPolicy(v1alpha1.ElasticPolicy{}).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"PYTHONUNBUFFERED", "1",
				"PET_RDZV_ENDPOINT", "train-worker-0:23456",
				"PET_RDZV_BACKEND", "c10d",
				"PET_NNODES", "3:3",
				"PET_RDZV_ID", "train",
			),
		},
		{
			name: "the template's own values are replaced where they stand",
			job: ddp.Clone().Env(v1alpha1.ReplicaWorker,
				corev1.EnvVar{Name: "NCCL_DEBUG", Value: "INFO"},
				corev1.EnvVar{Name: "RANK", Value: "99"},
				corev1.EnvVar{Name: "CKPT", Value: "/ckpt/$(RANK)"},
			).DefaultedObj(),
			role: v1alpha1.ReplicaWorker, index: 0,
			want: vars(
				"NCCL_DEBUG", "INFO",
				"RANK", "1",
				"CKPT", "/ckpt/$(RANK)",
				"PYTHONUNBUFFERED", "1",
				"MASTER_PORT", "23456",
				"PET_MASTER_PORT", "23456",
				"MASTER_ADDR", "train-master-0",
				"PET_MASTER_ADDR", "train-master-0",
				"WORLD_SIZE", "3",
				"PET_NPROC_PER_NODE", "auto",
				"PET_NODE_RANK", "1",
				"PET_NNODES", "3",
			),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podTemplate(t, PyTorch{}, tc.job, tc.role, tc.index)
			if diff := cmp.Diff(tc.want, pod.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPyTorchPodTemplate(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, tpl("trainer")).
		Container(v1alpha1.ReplicaMaster, corev1.Container{Name: "pytorch", Image: "registry.example/train:v1"}).
		Role(v1alpha1.ReplicaWorker, 1, tpl("pytorch")).DefaultedObj()
	pod := podTemplate(t, PyTorch{}, job, v1alpha1.ReplicaMaster, 0)
	if pod.Spec.Hostname != "train-master-0" || pod.Spec.Subdomain != "train" {
		t.Errorf("hostname %q, subdomain %q; want train-master-0, train", pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	// The port goes to the container named pytorch, not the first.
	wantPorts := [][]corev1.ContainerPort{nil, {{Name: "pytorchjob-port", ContainerPort: 23456, Protocol: corev1.ProtocolTCP}}}
	for i, c := range pod.Spec.Containers {
		if diff := cmp.Diff(wantPorts[i], c.Ports); diff != "" {
			t.Errorf("container %s ports (-want,+got):\n%s", c.Name, diff)
		}
		if len(c.Env) != 10 {
			t.Errorf("container %s has %d variables, want all 10 on every container", c.Name, len(c.Env))
		}
	}
}
