package topologyplacement

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/computedomain"
)

// TestChannelsSpreadMembers checks that a gang whose members each claim a
// ComputeDomain channel (from the template NVIDIA's controller writes) is
// planned a node apart, on nodes whose channel is free: draPlugin's two
// members of 4 GPUs would otherwise share one 8-GPU node, where
// DynamicResources can allocate only one of their channels.
func TestChannelsSpreadMembers(t *testing.T) {
	cd := &computedomain.ComputeDomain{Spec: computedomain.Spec{NumNodes: 2, Channel: &computedomain.ChannelSpec{
		ResourceClaimTemplate: computedomain.ResourceClaimTemplateRef{Name: "chan"}}}}
	cd.Namespace, cd.Name, cd.UID = "ns", "cd", "cd-uid"
	tmpl, err := computedomain.ChannelClaimTemplate(cd)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// taken are the nodes whose channel another domain's claim holds;
		// bare the nodes that publish no channel.
		taken, bare []string
		// noChannel: the members claim GPUs only.
		noChannel bool
		want      []string
		// wantCode is PreFilter's: a gang that waits is
		// UnschedulableAndUnresolvable, retried on cluster events.
		wantCode fwk.Code
	}{
		{name: "a node each", want: []string{"d1", "d2"}},
		{name: "without channels they share a node", noChannel: true, want: []string{"d1", "d1"}},
		{name: "another domain holds a channel", taken: []string{"d2"}, wantCode: fwk.UnschedulableAndUnresolvable},
		{name: "a node without channels", bare: []string{"d2"}, wantCode: fwk.UnschedulableAndUnresolvable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, dra := draPlugin(t, 2)
			dra.Templates["ns/chan"] = tmpl
			for _, node := range []string{"d1", "d2"} {
				if !slices.Contains(tc.bare, node) {
					dra.GPUSlices = append(dra.GPUSlices, computedomain.NodeSlice(node, 1))
				}
			}
			for _, node := range tc.taken {
				dra.Devices.Insert(structured.MakeDeviceID(computedomain.DriverName, node, "channel-0"))
			}
			if !tc.noChannel {
				for _, pod := range p.pods {
					pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "channel", ResourceClaimTemplateName: ptr.To("chan")})
					pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: "channel"})
				}
			}
			_, status := p.PreFilter(context.Background(), framework.NewCycleState(), p.pods[0], p.nodes)
			if status.Code() != tc.wantCode {
				t.Fatalf("PreFilter = %v (code %v), want code %v", status, status.Code(), tc.wantCode)
			}
			if tc.wantCode != fwk.Success {
				if !strings.Contains(status.Message(), "ComputeDomain channels") {
					t.Errorf("PreFilter says %q, naming no ComputeDomain channels", status.Message())
				}
				return
			}
			g, ok := p.gangs.Books.Get(p.planKey(p.pods[0]))
			if !ok {
				t.Fatal("no plan in the books")
			}
			var got []string
			for _, m := range g.Plan().Members {
				got = append(got, m.Node)
			}
			slices.Sort(got)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("members' nodes (-want,+got):\n%s", d)
			}
		})
	}
}

// TestChannelsHeld checks what evicting a pod frees of its node's
// channels: those its allocated claims hold there, and nothing of a claim
// of GPUs only.
func TestChannelsHeld(t *testing.T) {
	p, dra := draPlugin(t, 1)
	alloc := func(results ...resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
		return &resourcev1.ResourceClaim{Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			Devices: resourcev1.DeviceAllocationResult{Results: results}}}}
	}
	dra.Claims = map[string]*resourcev1.ResourceClaim{
		"ns/m-0-channel": alloc(resourcev1.DeviceRequestAllocationResult{Driver: computedomain.DriverName, Pool: "d1", Device: "channel-0"}),
		"ns/m-0-gpus":    alloc(resourcev1.DeviceRequestAllocationResult{Driver: "gpu.nvidia.com", Pool: "d1", Device: "gpu-0"}),
	}
	pod := p.pods[0]
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{
		{Name: "gpus", ResourceClaimName: ptr.To("m-0-gpus")},
		{Name: "channel", ResourceClaimName: ptr.To("m-0-channel")},
	}
	if got := p.view.ChannelsHeld(pod, "d1"); got != 1 {
		t.Errorf("channelsHeld on d1 = %d, want 1", got)
	}
	if got := p.view.ChannelsHeld(pod, "d2"); got != 0 {
		t.Errorf("channelsHeld on d2 = %d, want 0", got)
	}
}
