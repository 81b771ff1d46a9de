package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestValidateTemplates(t *testing.T) {
	worker := func(mutate func(*corev1.PodTemplateSpec)) *TrainingJob {
		j := validPyTorch()
		w := j.Spec.ReplicaSpecs[ReplicaWorker]
		mutate(&w.Template)
		j.Spec.ReplicaSpecs[ReplicaWorker] = w
		return j
	}
	cases := []struct {
		name string
		job  *TrainingJob
		// want is the error's field and reason; empty for an accepted job.
		// privileged marks a refusal the namespace label lifts.
		want       string
		privileged bool
	}{
		{name: "plain", job: validPyTorch()},
		{name: "lockstep-scheduler", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.SchedulerName = "lockstep-scheduler" })},
		{name: "gang label naming the job", job: worker(func(p *corev1.PodTemplateSpec) {
			p.Labels = map[string]string{"scheduling.x-k8s.io/pod-group": "train", "lockstep.dev/job-name": "train"}
		})},
		{
			name: "rendezvous ID", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PET_RDZV_ID", Value: "mine"}}
			}),
			want: "spec.replicaSpecs[Worker].template.spec.containers[" + validPyTorch().Spec.ReplicaSpecs[ReplicaWorker].Template.Spec.Containers[0].Name +
				"].env[PET_RDZV_ID]: Forbidden: is set by the controller, unique to each incarnation",
		},
		{
			name: "incarnation in an init container", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.InitContainers = []corev1.Container{{Name: "restore", Env: []corev1.EnvVar{{Name: "LOCKSTEP_INCARNATION", Value: "0"}}}}
			}),
			want: "spec.replicaSpecs[Worker].template.spec.initContainers[restore].env[LOCKSTEP_INCARNATION]: Forbidden: is set by the controller",
		},
		{
			name: "nodeName", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.NodeName = "gpu-1" }),
			want: "spec.replicaSpecs[Worker].template.spec.nodeName: Forbidden: must not be set",
		},
		{
			name: "other scheduler", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.SchedulerName = "default-scheduler" }),
			want: "spec.replicaSpecs[Worker].template.spec.schedulerName: Forbidden: must be lockstep-scheduler or unset",
		},
		{
			name: "another gang", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Labels = map[string]string{"scheduling.x-k8s.io/pod-group": "other"}
			}),
			want: "spec.replicaSpecs[Worker].template.metadata.labels[scheduling.x-k8s.io/pod-group]: Forbidden: must be unset or the job's name (train)",
		},
		{
			name: "another job's label", job: worker(func(p *corev1.PodTemplateSpec) { p.Labels = map[string]string{"lockstep.dev/job-name": "other"} }),
			want: "spec.replicaSpecs[Worker].template.metadata.labels[lockstep.dev/job-name]: Forbidden",
		},
		{
			name: "hostNetwork", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.HostNetwork = true }),
			want: "spec.replicaSpecs[Worker].template.spec.hostNetwork: Forbidden: privileged or host-sharing templates are refused", privileged: true,
		},
		{
			name: "hostPID", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.HostPID = true }),
			want: "spec.replicaSpecs[Worker].template.spec.hostPID: Forbidden", privileged: true,
		},
		{
			name: "hostIPC", job: worker(func(p *corev1.PodTemplateSpec) { p.Spec.HostIPC = true }),
			want: "spec.replicaSpecs[Worker].template.spec.hostIPC: Forbidden", privileged: true,
		},
		{
			name: "privileged container", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}),
			want: "spec.replicaSpecs[Worker].template.spec.containers[main].securityContext.privileged: Forbidden", privileged: true,
		},
		{
			name: "privileged init container", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
			}),
			want: "spec.replicaSpecs[Worker].template.spec.initContainers[init].securityContext.privileged: Forbidden", privileged: true,
		},
		{
			name: "hostPath", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			}),
			want: "spec.replicaSpecs[Worker].template.spec.volumes[host].hostPath: Forbidden", privileged: true,
		},
		{
			name: "unprivileged securityContext", job: worker(func(p *corev1.PodTemplateSpec) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(false)}
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, allow := range []bool{false, true} {
				errs := tc.job.ValidateTemplates(allow)
				want := tc.want
				if allow && tc.privileged {
					want = ""
				}
				switch {
				case want == "" && len(errs) > 0:
					t.Errorf("allowPrivileged=%v: unexpected errors %v", allow, errs)
				case want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), want)):
					t.Errorf("allowPrivileged=%v: got %v, want one error containing %q", allow, errs, want)
				}
			}
			// Template rules are the cluster's policy, not the CRD's.
			if errs := tc.job.Validate(); len(errs) > 0 {
				t.Errorf("Validate: %v", errs)
			}
		})
	}
}
