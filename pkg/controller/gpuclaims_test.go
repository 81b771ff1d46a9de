package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// claimTemplate is a ResourceClaimTemplate of ns/name whose claim asks for
// requests.
func claimTemplate(ns, name string, requests ...resourcev1.DeviceRequest) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}},
	}
}

// gpuClaimRequest is a request of n GPUs of the GPU class.
func gpuClaimRequest(n int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}
}

// withClaims makes every role's pods claim from templates, one pod claim
// each.
func withClaims(templates ...string) func(*v1alpha1.TrainingJob) {
	return func(j *v1alpha1.TrainingJob) {
		for role, rs := range j.Spec.ReplicaSpecs {
			for _, tmpl := range templates {
				rs.Template.Spec.ResourceClaims = append(rs.Template.Spec.ResourceClaims, corev1.PodResourceClaim{Name: tmpl, ResourceClaimTemplateName: ptr.To(tmpl)})
			}
			j.Spec.ReplicaSpecs[role] = rs
		}
	}
}

func TestGPUClaimTemplate(t *testing.T) {
	job := utiltesting.MakeTrainingJob("train", "ns").Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaWorker, 2, envtestTemplate(0)).Obj()
	job.UID = "uid-train"
	channel := resourcev1.DeviceRequest{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}
	four := claimTemplate("ns", "four", gpuClaimRequest(4))
	four.Spec.Labels = map[string]string{"team": "a"}
	rewritten, _ := gpuclaim.OneRootFirst(four.Spec.Spec)
	tests := []struct {
		name string
		src  *resourcev1.ResourceClaimTemplate
		want *resourcev1.ResourceClaimTemplate
	}{
		{
			name: "four GPUs: a copy the job owns, one PCIe root first",
			src:  four,
			want: &resourcev1.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-four-one-root",
					Labels:      map[string]string{lockstep.LabelJobName: "train"},
					Annotations: map[string]string{lockstep.AnnotationClaimTemplateSource: "uid-four"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: "train", UID: "uid-train",
						Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
				Spec: resourcev1.ResourceClaimTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}}, Spec: rewritten},
			},
		},
		{name: "one GPU is claimed as written", src: claimTemplate("ns", "one", gpuClaimRequest(1))},
		{name: "a channel is claimed as written", src: claimTemplate("ns", "channel", channel)},
		{name: "a copy's name too long is claimed as written", src: claimTemplate("ns", strings.Repeat("t", 240), gpuClaimRequest(4))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := gpuClaimTemplate(job, tc.src)
			if ok != (tc.want != nil) {
				t.Fatalf("gpuClaimTemplate ok = %t, want %t", ok, tc.want != nil)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("gpuClaimTemplate (-want,+got):\n%s", d)
			}
		})
	}
}

func TestClaimTemplateRefs(t *testing.T) {
	job := func(mutate ...func(*v1alpha1.TrainingJob)) *v1alpha1.TrainingJob {
		return pyTorchJob("ns", "train", mutate...)
	}
	asWritten := func(j *v1alpha1.TrainingJob) {
		j.Spec.Topology = &v1alpha1.TopologyConstraint{Level: "host", GPUClaims: v1alpha1.GPUClaimsAsWritten}
	}
	byName := func(j *v1alpha1.TrainingJob) {
		rs := j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
		rs.Template.Spec.ResourceClaims = append(rs.Template.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "shared", ResourceClaimName: ptr.To("shared")})
		j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = rs
	}
	type ref struct{ Name, Path string }
	tests := []struct {
		name string
		job  *v1alpha1.TrainingJob
		want []ref
	}{
		{name: "no claims", job: job()},
		{
			name: "each template once, by role then claim",
			job:  job(withClaims("gpus", "other"), byName),
			want: []ref{
				{"gpus", "spec.replicaSpecs[Master].template.spec.resourceClaims[0].resourceClaimTemplateName"},
				{"other", "spec.replicaSpecs[Master].template.spec.resourceClaims[1].resourceClaimTemplateName"},
			},
		},
		{name: "opted out", job: job(withClaims("gpus"), asWritten)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []ref
			for _, r := range claimTemplateRefs(tc.job) {
				got = append(got, ref{r.name, r.path.String()})
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("claimTemplateRefs (-want,+got):\n%s", d)
			}
		})
	}
}

func TestClaimTemplatesApply(t *testing.T) {
	spec := corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptr.To("four")},
		{Name: "one", ResourceClaimTemplateName: ptr.To("one")},
		{Name: "shared", ResourceClaimName: ptr.To("four")},
	}}
	claimTemplates{"four": "train-four-one-root"}.apply(&spec)
	want := []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptr.To("train-four-one-root")},
		{Name: "one", ResourceClaimTemplateName: ptr.To("one")},
		{Name: "shared", ResourceClaimName: ptr.To("four")},
	}
	if d := cmp.Diff(want, spec.ResourceClaims); d != "" {
		t.Errorf("resourceClaims (-want,+got):\n%s", d)
	}
}
