package gpuclaim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// gpuRequest is a claim request of n GPUs.
func gpuRequest(name string, n int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}
}

// claimSpec is a claim spec of requests.
func claimSpec(requests ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}
}

func TestCount(t *testing.T) {
	channel := resourcev1.DeviceRequest{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}
	pcieRoot := resourcev1.FullyQualifiedName(lockstep.DRAPCIeRootAttribute)
	uuid := resourcev1.FullyQualifiedName(lockstep.DRAGPUDriver + "/" + lockstep.DRAUUIDAttribute)
	withConstraint := func(spec resourcev1.ResourceClaimSpec, c resourcev1.DeviceConstraint) resourcev1.ResourceClaimSpec {
		spec.Devices.Constraints = append(spec.Devices.Constraints, c)
		return spec
	}
	type result struct {
		GPUs    int
		Problem bool
	}
	tests := []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want result
	}{
		{name: "exact count", spec: claimSpec(gpuRequest("gpus", 4)), want: result{GPUs: 4}},
		{name: "two requests add up", spec: claimSpec(gpuRequest("a", 4), gpuRequest("b", 2)), want: result{GPUs: 6}},
		{
			name: "mode and count left to defaulting",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass}}),
			want: result{GPUs: 1},
		},
		{name: "another class is not GPUs", spec: claimSpec(channel), want: result{}},
		{name: "GPUs beside a channel", spec: claimSpec(channel, gpuRequest("gpus", 8)), want: result{GPUs: 8}},
		{
			name: "all of a node's GPUs",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeAll}}),
			want: result{Problem: true},
		},
		{
			name: "CEL selector",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: lockstep.DRAGPUDeviceClass, Count: 2,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}}}),
			want: result{Problem: true},
		},
		{
			name: "firstAvailable counts its first alternative",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "eight", DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 8},
				{Name: "four", DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4},
			}}),
			want: result{GPUs: 8},
		},
		{
			name: "firstAvailable with GPUs only as a fallback",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "dev", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "mig", DeviceClassName: "mig.nvidia.com", Count: 1},
				{Name: "gpu", DeviceClassName: lockstep.DRAGPUDeviceClass, Count: 1},
			}}),
			want: result{Problem: true},
		},
		{
			name: "firstAvailable of other classes",
			spec: claimSpec(resourcev1.DeviceRequest{Name: "dev", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "mig", DeviceClassName: "mig.nvidia.com", Count: 1}}}),
			want: result{},
		},
		{
			name: "one PCIe root",
			spec: withConstraint(claimSpec(gpuRequest("gpus", 4)), resourcev1.DeviceConstraint{Requests: []string{"gpus"}, MatchAttribute: &pcieRoot}),
			want: result{GPUs: 4},
		},
		{
			name: "matchAttribute on another attribute",
			spec: withConstraint(claimSpec(gpuRequest("gpus", 4)), resourcev1.DeviceConstraint{MatchAttribute: &uuid}),
			want: result{Problem: true},
		},
		{
			name: "distinctAttribute on the GPUs",
			spec: withConstraint(claimSpec(gpuRequest("gpus", 4)), resourcev1.DeviceConstraint{Requests: []string{"gpus"}, DistinctAttribute: &uuid}),
			want: result{Problem: true},
		},
		{
			name: "a constraint on other requests only",
			spec: withConstraint(claimSpec(gpuRequest("gpus", 4), channel), resourcev1.DeviceConstraint{Requests: []string{"channel"}, MatchAttribute: &uuid}),
			want: result{GPUs: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, problem := Count(&tc.spec)
			got := result{GPUs: n, Problem: problem != ""}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Count (-want,+got):\n%s\nproblem: %s", diff, problem)
			}
		})
	}
}
