package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// jobWrapper builds TrainingJobs for tests: makeJob(...).Role(...).Obj().
type jobWrapper struct{ v1alpha1.TrainingJob }

// makeJob starts the job "train" in namespace "ml".
func makeJob(f v1alpha1.Framework) *jobWrapper {
	return &jobWrapper{v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
		Spec:       v1alpha1.TrainingJobSpec{Framework: f, ReplicaSpecs: map[v1alpha1.ReplicaType]v1alpha1.ReplicaSpec{}},
	}}
}

// Role adds n pods of role with one container named container.
func (w *jobWrapper) Role(role v1alpha1.ReplicaType, n int32, container string) *jobWrapper {
	w.Spec.ReplicaSpecs[role] = v1alpha1.ReplicaSpec{
		Replicas: &n,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: container, Image: "registry.example/train:v1"},
		}}},
	}
	return w
}

// Container adds a container to role's template.
func (w *jobWrapper) Container(role v1alpha1.ReplicaType, c corev1.Container) *jobWrapper {
	r := w.Spec.ReplicaSpecs[role]
	r.Template.Spec.Containers = append(r.Template.Spec.Containers, c)
	w.Spec.ReplicaSpecs[role] = r
	return w
}

// Port names a port on the first container of role's template.
func (w *jobWrapper) Port(role v1alpha1.ReplicaType, name string, port int32) *jobWrapper {
	r := w.Spec.ReplicaSpecs[role]
	c := &r.Template.Spec.Containers[0]
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port})
	w.Spec.ReplicaSpecs[role] = r
	return w
}

// Env sets the first container's env on role's template.
func (w *jobWrapper) Env(role v1alpha1.ReplicaType, vars ...corev1.EnvVar) *jobWrapper {
	r := w.Spec.ReplicaSpecs[role]
	r.Template.Spec.Containers[0].Env = vars
	w.Spec.ReplicaSpecs[role] = r
	return w
}

func (w *jobWrapper) With(f func(*v1alpha1.TrainingJobSpec)) *jobWrapper {
	f(&w.Spec)
	return w
}

// Clone copies the wrapper, so one base job can seed several cases.
func (w *jobWrapper) Clone() *jobWrapper { return &jobWrapper{*w.TrainingJob.DeepCopy()} }

// ObjWith is Clone().With(f).Obj().
func (w *jobWrapper) ObjWith(f func(*v1alpha1.TrainingJobSpec)) *v1alpha1.TrainingJob {
	return w.Clone().With(f).Obj()
}

// Obj returns the job, defaulted as the reconciler hands it to adapters.
func (w *jobWrapper) Obj() *v1alpha1.TrainingJob {
	j := w.DeepCopy()
	j.Default()
	return j
}

func podTemplate(t *testing.T, a Adapter, job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) *corev1.PodTemplateSpec {
	t.Helper()
	before := job.DeepCopy()
	pod, err := a.PodTemplate(job, role, index)
	if err != nil {
		t.Fatalf("PodTemplate(%s, %d): %v", role, index, err)
	}
	if diff := cmp.Diff(before, job); diff != "" {
		t.Fatalf("PodTemplate modified the job (-before,+after):\n%s", diff)
	}
	return pod
}

// vars writes env literally: vars("A", "1", "B", "2").
func vars(kv ...string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return out
}
