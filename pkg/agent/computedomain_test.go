package agent

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/computedomain"
)

func TestDomainStatus(t *testing.T) {
	cd := &computedomain.ComputeDomain{ObjectMeta: metav1.ObjectMeta{UID: "cd-1"}, Spec: computedomain.Spec{NumNodes: 3}}
	// claim is a channel claim of domain, allocated on node (none: pending)
	// and reserved for a pod unless unreserved.
	claim := func(domain types.UID, node string, reserved bool) resourcev1.ResourceClaim {
		c := resourcev1.ResourceClaim{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Config: []resourcev1.DeviceClaimConfiguration{{
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     computedomain.DriverName,
				Parameters: runtime.RawExtension{Raw: fmt.Appendf(nil, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":%q}`, domain)},
			}},
		}}}}}
		if node != "" {
			c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Request: "channel", Driver: computedomain.DriverName, Pool: node, Device: "channel-0"},
			}}}
		}
		if reserved {
			c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p"}}
		}
		return c
	}
	cliques := map[string]string{"a1": "c1", "a2": "c1", "b1": "c2"}
	node := func(name string, index int) computedomain.Node {
		return computedomain.Node{Name: name, CliqueID: cliques[name], Index: index, Status: computedomain.StatusReady}
	}
	cases := []struct {
		name   string
		claims []resourcev1.ResourceClaim
		want   computedomain.Status
	}{
		{name: "no pods yet", want: computedomain.Status{Status: computedomain.StatusNotReady}},
		{
			name:   "two of three nodes joined",
			claims: []resourcev1.ResourceClaim{claim("cd-1", "a2", true), claim("cd-1", "a1", true), claim("cd-1", "", false)},
			want:   computedomain.Status{Status: computedomain.StatusNotReady, Nodes: []computedomain.Node{node("a1", 0), node("a2", 1)}},
		},
		{
			name:   "all three: ready, indexed within their clique",
			claims: []resourcev1.ResourceClaim{claim("cd-1", "a1", true), claim("cd-1", "b1", true), claim("cd-1", "a2", true)},
			want:   computedomain.Status{Status: computedomain.StatusReady, Nodes: []computedomain.Node{node("a1", 0), node("a2", 1), node("b1", 0)}},
		},
		{
			name:   "allocated but reserved for no pod, or another domain's",
			claims: []resourcev1.ResourceClaim{claim("cd-1", "a1", false), claim("cd-2", "a2", true)},
			want:   computedomain.Status{Status: computedomain.StatusNotReady},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, domainStatus(cd, tc.claims, cliques)); diff != "" {
				t.Errorf("domainStatus (-want,+got):\n%s", diff)
			}
		})
	}
	// The pods released once the domain is ready: those its allocated
	// channels are reserved for, not another domain's, not a claim's
	// that is not allocated yet.
	pod := func(c resourcev1.ResourceClaim, name string) resourcev1.ResourceClaim {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: types.UID(name + "-uid")}}
		return c
	}
	holders := channelHolders("cd-1", []resourcev1.ResourceClaim{
		pod(claim("cd-1", "a1", true), "w0"), pod(claim("cd-1", "", true), "pending"),
		pod(claim("cd-2", "a2", true), "other"), pod(claim("cd-1", "b1", true), "w1"),
	})
	want := []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "w0", UID: "w0-uid"}, {Resource: "pods", Name: "w1", UID: "w1-uid"}}
	if diff := cmp.Diff(want, holders); diff != "" {
		t.Errorf("channelHolders (-want,+got):\n%s", diff)
	}
}
