package gpuclaim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestOneRootFirst(t *testing.T) {
	pcieRoot := resourcev1.FullyQualifiedName(lockstep.DRAPCIeRootAttribute)
	channel := resourcev1.DeviceRequest{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}
	selectors := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}
	tolerations := []resourcev1.DeviceToleration{{Key: "k", Operator: resourcev1.DeviceTolerationOpExists}}
	oneRootFirst := func(name string, n int64) (resourcev1.DeviceRequest, resourcev1.DeviceConstraint) {
		sub := func(s string) resourcev1.DeviceSubRequest {
			return resourcev1.DeviceSubRequest{Name: s, DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}
		}
		return resourcev1.DeviceRequest{Name: name, FirstAvailable: []resourcev1.DeviceSubRequest{sub(OneRootSubrequest), sub(AnyRootSubrequest)}},
			resourcev1.DeviceConstraint{Requests: []string{name + "/" + OneRootSubrequest}, MatchAttribute: &pcieRoot}
	}
	withConstraints := func(spec resourcev1.ResourceClaimSpec, cs ...resourcev1.DeviceConstraint) resourcev1.ResourceClaimSpec {
		spec.Devices.Constraints = append(spec.Devices.Constraints, cs...)
		return spec
	}
	four, fourRoot := oneRootFirst("gpus", 4)
	two, twoRoot := oneRootFirst("b", 2)
	selected := gpuRequest("gpus", 4)
	selected.Exactly.Selectors, selected.Exactly.Tolerations = selectors, tolerations
	selectedOut, selectedRoot := oneRootFirst("gpus", 4)
	for i := range selectedOut.FirstAvailable {
		selectedOut.FirstAvailable[i].Selectors, selectedOut.FirstAvailable[i].Tolerations = selectors, tolerations
	}
	admin := gpuRequest("gpus", 4)
	admin.Exactly.AdminAccess = ptr.To(true)
	all := gpuRequest("gpus", 0)
	all.Exactly.AllocationMode = resourcev1.DeviceAllocationModeAll
	distinct := resourcev1.DeviceConstraint{Requests: []string{"gpus"}, DistinctAttribute: &pcieRoot}

	tests := []struct {
		name        string
		spec        resourcev1.ResourceClaimSpec
		want        resourcev1.ResourceClaimSpec
		wantChanged bool
	}{
		{name: "four GPUs", spec: claimSpec(gpuRequest("gpus", 4)), want: withConstraints(claimSpec(four), fourRoot), wantChanged: true},
		{
			name: "each GPU request beside a channel", spec: claimSpec(gpuRequest("gpus", 4), channel, gpuRequest("b", 2)),
			want: withConstraints(claimSpec(four, channel, two), fourRoot, twoRoot), wantChanged: true,
		},
		{name: "selectors and tolerations kept", spec: claimSpec(selected), want: withConstraints(claimSpec(selectedOut), selectedRoot), wantChanged: true},
		{name: "one GPU", spec: claimSpec(gpuRequest("gpus", 1)), want: claimSpec(gpuRequest("gpus", 1))},
		{name: "a channel only", spec: claimSpec(channel), want: claimSpec(channel)},
		{name: "all GPUs", spec: claimSpec(all), want: claimSpec(all)},
		{name: "admin access", spec: claimSpec(admin), want: claimSpec(admin)},
		{name: "already firstAvailable", spec: withConstraints(claimSpec(four), fourRoot), want: withConstraints(claimSpec(four), fourRoot)},
		{
			name: "a constraint the author wrote", spec: withConstraints(claimSpec(gpuRequest("gpus", 4)), distinct),
			want: withConstraints(claimSpec(gpuRequest("gpus", 4)), distinct),
		},
		{
			name: "a constraint on every request", spec: withConstraints(claimSpec(gpuRequest("gpus", 4)), resourcev1.DeviceConstraint{MatchAttribute: &pcieRoot}),
			want: withConstraints(claimSpec(gpuRequest("gpus", 4)), resourcev1.DeviceConstraint{MatchAttribute: &pcieRoot}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.spec.DeepCopy()
			got, changed := OneRootFirst(tc.spec)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("OneRootFirst (-want,+got):\n%s", d)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %t, want %t", changed, tc.wantChanged)
			}
			if d := cmp.Diff(before, &tc.spec); d != "" {
				t.Errorf("OneRootFirst modified its input (-before,+after):\n%s", d)
			}
			// What the controller writes, the scheduler plans as the same
			// GPUs, predicted one root first.
			if changed {
				wantGPUs, wantProblem := Count(&tc.spec)
				gpus, problem := Count(&got)
				if gpus != wantGPUs || (problem == "") != (wantProblem == "") {
					t.Errorf("Count(rewritten) = %d, %q; want %d, %q", gpus, problem, wantGPUs, wantProblem)
				}
				// Predicted one root first when one request has the GPUs.
				if wantProblem == "" && len(got.Devices.Constraints) == 1 && !OnePCIeRoot(&got) {
					t.Errorf("OnePCIeRoot(rewritten) = false, want true")
				}
			}
		})
	}
}

func TestOnePCIeRoot(t *testing.T) {
	pcieRoot := resourcev1.FullyQualifiedName(lockstep.DRAPCIeRootAttribute)
	rewritten, _ := OneRootFirst(claimSpec(gpuRequest("gpus", 4)))
	withConstraint := func(spec resourcev1.ResourceClaimSpec, requests ...string) resourcev1.ResourceClaimSpec {
		spec.Devices.Constraints = append(spec.Devices.Constraints, resourcev1.DeviceConstraint{Requests: requests, MatchAttribute: &pcieRoot})
		return spec
	}
	tests := []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want bool
	}{
		{name: "as OneRootFirst writes it", spec: rewritten, want: true},
		{name: "no constraint", spec: claimSpec(gpuRequest("gpus", 4))},
		{name: "matchAttribute on the request", spec: withConstraint(claimSpec(gpuRequest("gpus", 4)), "gpus"), want: true},
		{name: "matchAttribute on every request", spec: withConstraint(claimSpec(gpuRequest("gpus", 4))), want: true},
		{name: "matchAttribute on another request", spec: withConstraint(claimSpec(gpuRequest("gpus", 4)), "other")},
		{name: "GPUs from two requests", spec: withConstraint(claimSpec(gpuRequest("a", 2), gpuRequest("b", 2)), "a", "b")},
		{
			name: "on the fallback alternative only",
			spec: func() resourcev1.ResourceClaimSpec {
				s := *rewritten.DeepCopy()
				s.Devices.Constraints[0].Requests = []string{"gpus/" + AnyRootSubrequest}
				return s
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := OnePCIeRoot(&tc.spec); got != tc.want {
				t.Errorf("OnePCIeRoot = %t, want %t", got, tc.want)
			}
		})
	}
}
