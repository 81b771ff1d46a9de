package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Template rules: what deploy/default/trainingjob-policy.yaml, a
// ValidatingAdmissionPolicy on every TrainingJob create and update, refuses
// in spec.replicaSpecs[<role>].template. They are not CRD rules (Validate
// mirrors those): they are the cluster's policy, and the privileged ones
// depend on the namespace. deploy/render_test.go checks the policy names
// every field listed here.

// RefusedTemplateFields are the template fields always refused, relative to
// spec.replicaSpecs[<role>].template: a template may not bind its pods to a
// node, ask for another scheduler, or put them in another gang.
func RefusedTemplateFields() []string {
	return []string{
		"spec.nodeName",
		"spec.schedulerName",
		"metadata.labels[" + lockstep.PodGroupLabel + "]",
		"metadata.labels[" + lockstep.LabelJobName + "]",
		"spec.containers[*].env[" + lockstep.EnvIncarnation + "]",
		"spec.containers[*].env[" + lockstep.EnvRendezvousID + "]",
		"spec.containers[*].env[" + lockstep.EnvResumeFrom + "]",
		"spec.containers[*].env[" + lockstep.EnvResumeStep + "]",
	}
}

// ValidateReservedEnv refuses templates that set a variable the controller
// makes unique per incarnation (lockstep.ReservedEnv): the fence between a
// gang's incarnations (docs/controller.md, "Incarnations") would otherwise
// be either silently overridden or lost. The controller checks it too, so
// a cluster without the template policy refuses the job the same way.
func (j *TrainingJob) ValidateReservedEnv() field.ErrorList {
	var errs field.ErrorList
	for _, role := range sortedRoles(j.Spec.ReplicaSpecs) {
		p := field.NewPath("spec", "replicaSpecs").Key(string(role)).Child("template", "spec")
		spec := j.Spec.ReplicaSpecs[role].Template.Spec
		for _, cs := range []struct {
			name       string
			containers []corev1.Container
		}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
			for _, c := range cs.containers {
				for _, e := range c.Env {
					why, reserved := lockstep.ReservedEnv[e.Name]
					if reserved {
						errs = append(errs, field.Forbidden(p.Child(cs.name).Key(c.Name).Child("env").Key(e.Name), why))
					}
				}
			}
		}
	}
	return errs
}

// PrivilegedTemplateFields are the template fields refused unless the
// namespace is labelled lockstep.LabelAllowPrivilegedTemplates "true",
// relative to spec.replicaSpecs[<role>].template ("[*]" for each
// container or volume).
func PrivilegedTemplateFields() []string {
	return []string{
		"spec.hostNetwork",
		"spec.hostPID",
		"spec.hostIPC",
		"spec.initContainers[*].securityContext.privileged",
		"spec.containers[*].securityContext.privileged",
		"spec.volumes[*].hostPath",
	}
}

// ValidateTemplates checks the roles' templates against the template
// policy: the fields of RefusedTemplateFields always, and those of
// PrivilegedTemplateFields unless allowPrivileged (the namespace's
// lockstep.LabelAllowPrivilegedTemplates is "true").
func (j *TrainingJob) ValidateTemplates(allowPrivileged bool) field.ErrorList {
	errs := j.ValidateReservedEnv()
	for _, role := range sortedRoles(j.Spec.ReplicaSpecs) {
		tpl := j.Spec.ReplicaSpecs[role].Template
		p := field.NewPath("spec", "replicaSpecs").Key(string(role)).Child("template")
		spec := p.Child("spec")
		if tpl.Spec.NodeName != "" {
			errs = append(errs, field.Forbidden(spec.Child("nodeName"), "must not be set: the lockstep-scheduler places the gang"))
		}
		if s := tpl.Spec.SchedulerName; s != "" && s != lockstep.SchedulerName {
			errs = append(errs, field.Forbidden(spec.Child("schedulerName"), "must be "+lockstep.SchedulerName+" or unset"))
		}
		for _, k := range []string{lockstep.PodGroupLabel, lockstep.LabelJobName} {
			if v, ok := tpl.Labels[k]; ok && v != j.Name {
				errs = append(errs, field.Forbidden(p.Child("metadata", "labels").Key(k),
					"must be unset or the job's name ("+j.Name+"): the controller puts every pod in the job's gang"))
			}
		}
		if allowPrivileged {
			continue
		}
		const why = "privileged or host-sharing templates are refused unless a cluster-admin labels the namespace " +
			lockstep.LabelAllowPrivilegedTemplates + "=true"
		for _, b := range []struct {
			name string
			set  bool
		}{{"hostNetwork", tpl.Spec.HostNetwork}, {"hostPID", tpl.Spec.HostPID}, {"hostIPC", tpl.Spec.HostIPC}} {
			if b.set {
				errs = append(errs, field.Forbidden(spec.Child(b.name), why))
			}
		}
		for _, cs := range []struct {
			name       string
			containers []corev1.Container
		}{{"initContainers", tpl.Spec.InitContainers}, {"containers", tpl.Spec.Containers}} {
			for _, c := range cs.containers {
				if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
					errs = append(errs, field.Forbidden(spec.Child(cs.name).Key(c.Name).Child("securityContext", "privileged"), why))
				}
			}
		}
		for _, v := range tpl.Spec.Volumes {
			if v.HostPath != nil {
				errs = append(errs, field.Forbidden(spec.Child("volumes").Key(v.Name).Child("hostPath"), why))
			}
		}
	}
	return errs
}
