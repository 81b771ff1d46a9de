// Package testing holds builders for the objects tests create, in the style
// of MakePod(name, ns).GPUs(8).Obj().
package testing

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a pod with one container and small CPU and memory requests.
func MakePod(name, namespace string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "main",
				Image: DefaultImage,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("1"),
						corev1.ResourceMemory: resource.MustParse("1Gi"),
					},
					Limits: corev1.ResourceList{},
				},
			}},
			// Never spend the default 30 s graceful period on fake pods.
			TerminationGracePeriodSeconds: new(int64),
		},
	}}
}

// Obj returns the built pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// GPUs sets the container's GPU limit (the device plugin's resources are
// requested through limits).
func (p *PodWrapper) GPUs(n int64) *PodWrapper {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Limits[lockstep.GPUResource] = q
	p.Spec.Containers[0].Resources.Requests[lockstep.GPUResource] = q
	return p
}

// SchedulerName sets the scheduler that must place the pod.
func (p *PodWrapper) SchedulerName(name string) *PodWrapper {
	p.Spec.SchedulerName = name
	return p
}

// PodGroup puts the pod in a scheduler-plugins PodGroup.
func (p *PodWrapper) PodGroup(name string) *PodWrapper {
	p.Labels[schedv1alpha1.PodGroupLabel] = name
	return p
}

// PodGroupWrapper builds a PodGroup.
type PodGroupWrapper struct{ schedv1alpha1.PodGroup }

// MakePodGroup starts a PodGroup of minMember pods.
func MakePodGroup(name, namespace string, minMember int32) *PodGroupWrapper {
	return &PodGroupWrapper{schedv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       schedv1alpha1.PodGroupSpec{MinMember: minMember},
	}}
}

// Obj returns the built PodGroup.
func (g *PodGroupWrapper) Obj() *schedv1alpha1.PodGroup { return &g.PodGroup }
