package testing

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// DefaultImage is the image of the containers MakePod and MakePodTemplate
// start with: fake nodes never pull it.
const DefaultImage = "registry.example/train:latest"

// TrainingJobWrapper builds a TrainingJob:
//
//	MakeTrainingJob("train", "ml").Framework(v1alpha1.FrameworkPyTorch).
//		Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, 3, tpl).Obj()
//
// Methods that change a role's template or count expect the role to have
// been added with Role or Replicas.
type TrainingJobWrapper struct{ v1alpha1.TrainingJob }

// MakeTrainingJob starts a job with no framework and no roles. It is not
// defaulted: Obj returns what a user would submit, DefaultedObj what the
// reconciler hands to adapters.
func MakeTrainingJob(name, namespace string) *TrainingJobWrapper {
	return &TrainingJobWrapper{v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}}
}

// Obj returns a copy of the built job, so that one wrapper can go on to
// seed other jobs.
func (j *TrainingJobWrapper) Obj() *v1alpha1.TrainingJob { return j.DeepCopy() }

// DefaultedObj returns a copy of the built job with the API's defaults
// applied (TrainingJob.Default), as the reconciler hands it to adapters.
func (j *TrainingJobWrapper) DefaultedObj() *v1alpha1.TrainingJob {
	job := j.DeepCopy()
	job.Default()
	return job
}

// Clone copies the wrapper, so that one base job can seed several cases.
func (j *TrainingJobWrapper) Clone() *TrainingJobWrapper {
	return &TrainingJobWrapper{*j.DeepCopy()}
}

// With applies fs to the job in order, for what no other method sets.
func (j *TrainingJobWrapper) With(fs ...func(*v1alpha1.TrainingJob)) *TrainingJobWrapper {
	for _, f := range fs {
		f(&j.TrainingJob)
	}
	return j
}

// Framework sets the job's framework.
func (j *TrainingJobWrapper) Framework(f v1alpha1.Framework) *TrainingJobWrapper {
	j.Spec.Framework = f
	return j
}

// UID sets the job's UID, which owner references and per-job state key on.
func (j *TrainingJobWrapper) UID(uid types.UID) *TrainingJobWrapper {
	j.ObjectMeta.UID = uid
	return j
}

// Generation sets the job's metadata.generation.
func (j *TrainingJobWrapper) Generation(g int64) *TrainingJobWrapper {
	j.ObjectMeta.Generation = g
	return j
}

// Label sets a label on the job.
func (j *TrainingJobWrapper) Label(key, value string) *TrainingJobWrapper {
	if j.Labels == nil {
		j.Labels = map[string]string{}
	}
	j.Labels[key] = value
	return j
}

// Queue puts the job in Kueue's LocalQueue q.
func (j *TrainingJobWrapper) Queue(q string) *TrainingJobWrapper {
	return j.Label(lockstep.LabelKueueQueueName, q)
}

// Role sets role to n replicas of a copy of tpl.
func (j *TrainingJobWrapper) Role(role v1alpha1.ReplicaType, n int32, tpl corev1.PodTemplateSpec) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) {
		*rs = v1alpha1.ReplicaSpec{Replicas: ptr.To(n), Template: *tpl.DeepCopy()}
	})
}

// Replicas sets role's count, adding the role with an empty template if
// the job has none (enough for code that only counts pods).
func (j *TrainingJobWrapper) Replicas(role v1alpha1.ReplicaType, n int32) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) { rs.Replicas = ptr.To(n) })
}

// RestartPolicy sets role's restart policy.
func (j *TrainingJobWrapper) RestartPolicy(role v1alpha1.ReplicaType, p v1alpha1.RestartPolicy) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) { rs.RestartPolicy = p })
}

// Container adds a container to role's template.
func (j *TrainingJobWrapper) Container(role v1alpha1.ReplicaType, c corev1.Container) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) {
		rs.Template.Spec.Containers = append(rs.Template.Spec.Containers, c)
	})
}

// Port names a port on the first container of role's template.
func (j *TrainingJobWrapper) Port(role v1alpha1.ReplicaType, name string, port int32) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) {
		c := &rs.Template.Spec.Containers[0]
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port})
	})
}

// Env sets the environment of the first container of role's template.
func (j *TrainingJobWrapper) Env(role v1alpha1.ReplicaType, vars ...corev1.EnvVar) *TrainingJobWrapper {
	return j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) { rs.Template.Spec.Containers[0].Env = vars })
}

// TemplateAnnotation sets an annotation on every role's template.
func (j *TrainingJobWrapper) TemplateAnnotation(key, value string) *TrainingJobWrapper {
	for role := range j.Spec.ReplicaSpecs {
		j.replicaSpec(role, func(rs *v1alpha1.ReplicaSpec) {
			if rs.Template.Annotations == nil {
				rs.Template.Annotations = map[string]string{}
			}
			rs.Template.Annotations[key] = value
		})
	}
	return j
}

// replicaSpec applies f to role's spec, which is stored by value.
func (j *TrainingJobWrapper) replicaSpec(role v1alpha1.ReplicaType, f func(*v1alpha1.ReplicaSpec)) *TrainingJobWrapper {
	if j.Spec.ReplicaSpecs == nil {
		j.Spec.ReplicaSpecs = map[v1alpha1.ReplicaType]v1alpha1.ReplicaSpec{}
	}
	rs := j.Spec.ReplicaSpecs[role]
	f(&rs)
	j.Spec.ReplicaSpecs[role] = rs
	return j
}

// ElasticPolicy makes the job elastic.
func (j *TrainingJobWrapper) ElasticPolicy(p v1alpha1.ElasticPolicy) *TrainingJobWrapper {
	j.Spec.ElasticPolicy = &p
	return j
}

// RunPolicy sets the job's run policy.
func (j *TrainingJobWrapper) RunPolicy(p v1alpha1.RunPolicy) *TrainingJobWrapper {
	j.Spec.RunPolicy = &p
	return j
}

// runPolicy returns the job's run policy, adding an empty one if it has
// none.
func (j *TrainingJobWrapper) runPolicy() *v1alpha1.RunPolicy {
	if j.Spec.RunPolicy == nil {
		j.Spec.RunPolicy = &v1alpha1.RunPolicy{}
	}
	return j.Spec.RunPolicy
}

// Suspend sets runPolicy.suspend.
func (j *TrainingJobWrapper) Suspend(s bool) *TrainingJobWrapper {
	j.runPolicy().Suspend = ptr.To(s)
	return j
}

// BackoffLimit sets runPolicy.backoffLimit.
func (j *TrainingJobWrapper) BackoffLimit(n int32) *TrainingJobWrapper {
	j.runPolicy().BackoffLimit = ptr.To(n)
	return j
}

// PriorityClass sets runPolicy.schedulingPolicy.priorityClass.
func (j *TrainingJobWrapper) PriorityClass(class string) *TrainingJobWrapper {
	rp := j.runPolicy()
	if rp.SchedulingPolicy == nil {
		rp.SchedulingPolicy = &v1alpha1.SchedulingPolicy{}
	}
	rp.SchedulingPolicy.PriorityClass = class
	return j
}

// Topology sets the job's topology constraint.
func (j *TrainingJobWrapper) Topology(level string, mode v1alpha1.TopologyMode) *TrainingJobWrapper {
	j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: level, Mode: mode}
	return j
}

// WithStatus sets the job's status (a method named Status would hide the
// field).
func (j *TrainingJobWrapper) WithStatus(st v1alpha1.TrainingJobStatus) *TrainingJobWrapper {
	j.Status = st
	return j
}

// PodTemplateWrapper builds the pod template of a TrainingJob role.
type PodTemplateWrapper struct{ corev1.PodTemplateSpec }

// MakePodTemplate starts a template of one container, named container (the
// frameworks find their container by name), running DefaultImage, with no
// resources.
func MakePodTemplate(container string) *PodTemplateWrapper {
	return &PodTemplateWrapper{corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: container, Image: DefaultImage}},
	}}}
}

// Obj returns a copy of the built template.
func (t *PodTemplateWrapper) Obj() corev1.PodTemplateSpec { return *t.DeepCopy() }

// Image sets the container's image.
func (t *PodTemplateWrapper) Image(image string) *PodTemplateWrapper {
	t.Spec.Containers[0].Image = image
	return t
}

// CPU sets the container's CPU request.
func (t *PodTemplateWrapper) CPU(q string) *PodTemplateWrapper {
	return t.request(corev1.ResourceCPU, resource.MustParse(q))
}

// GPULimit sets the container's GPU limit and no request: the device
// plugin's way, the API server defaults the request from it. The quantity
// is parsed, as from a manifest. Zero leaves an empty limit list.
func (t *PodTemplateWrapper) GPULimit(n int64) *PodTemplateWrapper {
	r := &t.Spec.Containers[0].Resources
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	if n > 0 {
		r.Limits[lockstep.GPUResource] = resource.MustParse(strconv.FormatInt(n, 10))
	}
	return t
}

func (t *PodTemplateWrapper) request(name corev1.ResourceName, q resource.Quantity) *PodTemplateWrapper {
	r := &t.Spec.Containers[0].Resources
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	r.Requests[name] = q
	return t
}

// NoGracePeriod sets terminationGracePeriodSeconds to 0: fake pods need
// not spend the default 30 s going away.
func (t *PodTemplateWrapper) NoGracePeriod() *PodTemplateWrapper {
	t.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return t
}

// Label sets a label on the template.
func (t *PodTemplateWrapper) Label(key, value string) *PodTemplateWrapper {
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[key] = value
	return t
}

// GPUClaim makes the template ask for GPUs through DRA: a pod claim "gpus"
// from the ResourceClaimTemplate named template (MakeGPUClaimTemplate),
// used by the container.
func (t *PodTemplateWrapper) GPUClaim(template string) *PodTemplateWrapper {
	t.Spec.ResourceClaims = append(t.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)})
	t.Spec.Containers[0].Resources.Claims = append(t.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "gpus"})
	return t
}
