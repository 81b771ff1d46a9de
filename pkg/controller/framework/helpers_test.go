package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// makeJob starts the job "train" in namespace "ml".
func makeJob(f v1alpha1.Framework) *utiltesting.TrainingJobWrapper {
	return utiltesting.MakeTrainingJob("train", "ml").Framework(f)
}

// tpl is a role's template: one container, named container.
func tpl(container string) corev1.PodTemplateSpec {
	return utiltesting.MakePodTemplate(container).Image("registry.example/train:v1").Obj()
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
