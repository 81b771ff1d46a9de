package testing

import (
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// MakeGPUClaimTemplate is a ResourceClaimTemplate whose claims ask for gpus
// GPUs of NVIDIA's DRA driver (DeviceClass gpu.nvidia.com), in one request
// named "gpus".
func MakeGPUClaimTemplate(name, ns string, gpus int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: gpus}}},
		}}},
	}
}
