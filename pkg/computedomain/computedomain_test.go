package computedomain

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeSlice(t *testing.T) {
	typ := func(s string) *string { return &s }
	id := int64(0)
	node := "tray-3"
	want := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "tray-3-compute-domain.nvidia.com"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   "compute-domain.nvidia.com",
			NodeName: &node,
			Pool:     resourcev1.ResourcePool{Name: "tray-3", Generation: 2, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{
				{Name: "channel-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: typ("channel")}, "id": {IntValue: &id}}},
				{Name: "daemon-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: typ("daemon")}, "id": {IntValue: &id}}},
			},
		},
	}
	if diff := cmp.Diff(want, NodeSlice("tray-3", 2)); diff != "" {
		t.Errorf("NodeSlice (-want,+got):\n%s", diff)
	}
}

// trainDomain is job "train"'s ComputeDomain over four nodes.
func trainDomain() *ComputeDomain {
	return &ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-compute-domain", UID: "cd-uid"},
		Spec:       Spec{NumNodes: 4, Channel: &ChannelSpec{ResourceClaimTemplate: ResourceClaimTemplateRef{Name: "train-channel"}}},
	}
}

func TestChannelClaimTemplate(t *testing.T) {
	cd := trainDomain()
	got, err := ChannelClaimTemplate(cd)
	if err != nil {
		t.Fatal(err)
	}
	// The opaque parameters compared as JSON values, not bytes.
	var params map[string]any
	if err := json.Unmarshal(got.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw, &params); err != nil {
		t.Fatal(err)
	}
	wantParams := map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig", "domainID": "cd-uid"}
	if diff := cmp.Diff(wantParams, params); diff != "" {
		t.Errorf("opaque parameters (-want,+got):\n%s", diff)
	}
	got.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw = nil
	want := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-channel", Labels: map[string]string{"resource.nvidia.com/computeDomain": "cd-uid"}},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}}},
			Config: []resourcev1.DeviceClaimConfiguration{{Requests: []string{"channel"},
				DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "compute-domain.nvidia.com"}}}},
		}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ChannelClaimTemplate (-want,+got):\n%s", diff)
	}

	cd.Spec.Channel = nil
	if _, err := ChannelClaimTemplate(cd); err == nil {
		t.Error("a ComputeDomain without a channel gave a template, want an error")
	}
}

// TestUnstructuredRoundTrip: what the controller creates reads back the
// same, without a status or creationTimestamp on create.
func TestUnstructuredRoundTrip(t *testing.T) {
	cd := &ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "d"},
		Spec:       Spec{NumNodes: 2, Channel: &ChannelSpec{ResourceClaimTemplate: ResourceClaimTemplateRef{Name: "c"}, AllocationMode: AllocationModeSingle}},
	}
	u, err := ToUnstructured(cd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Object["status"]; ok {
		t.Errorf("status %v on create, want none", u.Object["status"])
	}
	if u.GroupVersionKind() != GVK {
		t.Errorf("kind %v, want %v", u.GroupVersionKind(), GVK)
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cd, back); diff != "" {
		t.Errorf("round trip (-want,+got):\n%s", diff)
	}
}

// TestChannels checks the channel counting against the driver's own
// objects: the claim template its controller writes asks for one channel,
// and of a node's slice only channel-0 is a channel.
func TestChannels(t *testing.T) {
	tmpl, err := ChannelClaimTemplate(trainDomain())
	if err != nil {
		t.Fatal(err)
	}
	gpus := resourcev1.DeviceRequest{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}
	alt := resourcev1.DeviceRequest{Name: "alt", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "channel", DeviceClassName: ChannelDeviceClass}}}
	for _, tc := range []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want int
	}{
		{"the driver's template", tmpl.Spec.Spec, 1},
		{"GPUs only", resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{gpus}}}, 0},
		{"a first alternative", resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{gpus, alt}}}, 1},
	} {
		if got := ChannelRequests(&tc.spec); got != tc.want {
			t.Errorf("%s: ChannelRequests = %d, want %d", tc.name, got, tc.want)
		}
	}
	slice := NodeSlice("tray-0", 1)
	var channels []string
	for i := range slice.Spec.Devices {
		if IsChannel(slice.Spec.Driver, &slice.Spec.Devices[i]) {
			channels = append(channels, slice.Spec.Devices[i].Name)
		}
	}
	if diff := cmp.Diff([]string{"channel-0"}, channels); diff != "" {
		t.Errorf("channels of the node's slice (-want,+got):\n%s", diff)
	}
	if IsChannel("gpu.nvidia.com", &slice.Spec.Devices[0]) {
		t.Error("a device of another driver counts as a channel")
	}
	// Allocation results name devices only: the names must say the same.
	for _, d := range slice.Spec.Devices {
		if got, want := IsChannelDevice(slice.Spec.Driver, d.Name), IsChannel(slice.Spec.Driver, &d); got != want {
			t.Errorf("IsChannelDevice(%q) = %v, IsChannel %v", d.Name, got, want)
		}
	}
	if IsChannelDevice("gpu.nvidia.com", "channel-0") {
		t.Error("a device of another driver named channel-0 counts as a channel")
	}
}
