package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

// topologyCluster: n1 full, n2 with two GPUs requested and one lost GPU,
// n3 free (its pod finished), n4 free and without a leaf label; one pod is
// not bound yet.
func topologyCluster(t *testing.T) connector {
	return fakeCluster(t,
		hgxNode("n1", "leaf-a"), hgxNode("n2", "leaf-a"), hgxNode("n3", "leaf-b"), hgxNode("n4", ""),
		gpuPod("ml", "p1", "n1", 8, corev1.PodRunning),
		gpuPod("ml", "p2", "n2", 2, corev1.PodPending),
		gpuPod("ml", "p3", "n3", 8, corev1.PodSucceeded),
		gpuPod("ml", "p4", "", 4, corev1.PodPending),
		nodeTopology("n2", []int32{7}, map[string][]int32{"p2": {0, 1}}),
	)
}

func TestTopologyCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{{
		name: "tree",
		want: `DOMAIN            NODES   GPUS   FREE   UNHEALTHY
cluster           4       32     21     1
  spine=s1        4       32     21     1
    leaf=(n4)     1       8      8      <none>
      host=n4     1       8      8      <none>
    leaf=leaf-a   2       16     5      1
      host=n1     1       8      0      <none>
      host=n2     1       8      5      1
    leaf=leaf-b   1       8      8      <none>
      host=n3     1       8      8      <none>
`,
	}, {
		name: "depth",
		args: []string{"--depth", "1"},
		want: `DOMAIN       NODES   GPUS   FREE   UNHEALTHY
cluster      4       32     21     1
  spine=s1   4       32     21     1
`,
	}, {
		name: "one level",
		args: []string{"--level", "leaf"},
		want: `DOMAIN                 NODES   GPUS   FREE   UNHEALTHY
spine=s1/leaf=(n4)     1       8      8      <none>
spine=s1/leaf=leaf-a   2       16     5      1
spine=s1/leaf=leaf-b   1       8      8      <none>
`,
	}, {
		name: "selector and levels",
		args: []string{"-l", "fabric.topograph.run/tier-0=leaf-a", "--levels", "leaf=fabric.topograph.run/tier-0"},
		want: `DOMAIN          NODES   GPUS   FREE   UNHEALTHY
cluster         2       16     5      1
  leaf=leaf-a   2       16     5      1
    host=n1     1       8      0      <none>
    host=n2     1       8      5      1
`,
	}, {
		name: "yaml",
		args: []string{"--depth", "0", "-o", "yaml"},
		want: `domains:
- free: 21
  gpus: 32
  id: cluster
  level: cluster
  name: cluster
  nodes: 4
  unhealthy: 1
levels:
- host
- leaf
- spine
- cluster
`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runWith(t, topologyCluster(t), append([]string{"topology"}, tc.args...)...)
			if err != nil {
				t.Fatalf("topology: %v\n%s", err, stderr)
			}
			if diff := cmp.Diff(tc.want, stdout); diff != "" {
				t.Errorf("stdout (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestTopologyCommandErrors(t *testing.T) {
	tests := []struct {
		name    string
		objs    []runtime.Object
		args    []string
		wantErr string
	}{
		{name: "no nodes", wantErr: "the cluster has no nodes"},
		{name: "selector matches nothing", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"-l", "pool=none"}, wantErr: `no nodes match the selector "pool=none"`},
		{name: "absent level", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"--level", "block"}, wantErr: `no node is labelled for level "block" (label fabric.topograph.run/tier-2)`},
		{name: "unknown level", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"--level", "rack"}, wantErr: `unknown level "rack": the levels are host, leaf, spine, cluster`},
		{name: "level and depth", args: []string{"--level", "leaf", "--depth", "1"}, wantErr: "--level lists one level; it cannot be combined with --depth"},
		{name: "output", args: []string{"-o", "wide"}, wantErr: `unsupported output format "wide"`},
		{name: "bad levels", args: []string{"--levels", "leaf"}, wantErr: `--levels: "leaf" is not name=nodeLabelKey`},
		{name: "levels and config", args: []string{"--levels", "a=b", "--topology-config", "x"}, wantErr: "if any flags in the group [levels topology-config] are set none of the others can be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runWith(t, fakeCluster(t, tc.objs...), append([]string{"topology"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCapacityNodes(t *testing.T) {
	withInit := gpuPod("ml", "init", "n1", 1, corev1.PodRunning)
	withInit.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("4")},
	}}}
	terminating := gpuPod("ml", "terminating", "n1", 2, corev1.PodRunning)
	terminating.DeletionTimestamp = &metav1.Time{}
	pods := []corev1.Pod{
		*withInit, *terminating,
		*gpuPod("ml", "failed", "n1", 8, corev1.PodFailed),
		*gpuPod("ml", "unbound", "", 8, corev1.PodPending),
		*gpuPod("ml", "cpu", "n2", 0, corev1.PodRunning),
	}
	topos := map[string]*v1alpha1.NodeTopology{"n2": nodeTopology("n2", []int32{0, 0, 3}, map[string][]int32{"cpu": {1}})}
	got := capacityNodes([]corev1.Node{*hgxNode("n1", "a"), *hgxNode("n2", "a")}, pods, topos)
	want := []capacity.Node{
		// The init container's 4 GPUs exceed the app's 1; a terminating
		// pod holds its GPUs until it is gone.
		{Name: "n1", Labels: hgxNode("n1", "a").Labels, Allocatable: 8, Requested: 6},
		{Name: "n2", Labels: hgxNode("n2", "a").Labels, Allocatable: 8, Reported: &capacity.Reported{Usable: 5, Unhealthy: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacityNodes (-want,+got):\n%s", diff)
	}
}

// draNode is hgxNode without nvidia.com/gpu: NVIDIA's DRA driver serves its
// GPUs.
func draNode(name, leaf string) *corev1.Node {
	n := hgxNode(name, leaf)
	n.Status.Allocatable = nil
	return n
}

// draTopology is nodeTopology with the GPUs' UUIDs, GPU-<node>-<index>, as
// the agent publishes them.
func draTopology(node string, allocations map[string][]int32) *v1alpha1.NodeTopology {
	nt := nodeTopology(node, nil, allocations)
	for i := range nt.Spec.GPUCount {
		nt.Spec.GPUs = append(nt.Spec.GPUs, v1alpha1.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i)})
	}
	return nt
}

// gpuSlice is the gpu.nvidia.com ResourceSlice of node's pool, of
// generation gen, publishing gpus whole GPUs gpu-<i> with the UUIDs of
// draTopology, and mig MIG devices besides.
func gpuSlice(node string, gen int64, gpus, mig int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-gpu-%d", node, gen)},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   lockstep.DRAGPUDriver,
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
		},
	}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To("gpu")},
				"uuid": {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
			},
		})
	}
	for i := range mig {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d-mig-19-0-1", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To("mig")},
				"uuid": {StringValue: ptr.To(fmt.Sprintf("MIG-%s-%d", node, i))},
			},
		})
	}
	return s
}

// channelSlice is the compute-domain driver's slice of node, with its
// default channel.
func channelSlice(node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-channels"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   computedomain.DriverName,
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "channel-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				computedomain.AttributeType: {StringValue: ptr.To(computedomain.DeviceTypeChannel)},
			}}},
		},
	}
}

// gpuClaim is ResourceClaim ml/name allocated devices, each
// "driver/pool/device"; none leaves it unallocated.
func gpuClaim(t *testing.T, name string, devices ...string) *resourcev1.ResourceClaim {
	t.Helper()
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
	if len(devices) == 0 {
		return c
	}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		parts := strings.Split(d, "/")
		if len(parts) != 3 {
			t.Fatalf("device %q is not driver/pool/device", d)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "gpus", Driver: parts[0], Pool: parts[1], Device: parts[2],
		})
	}
	return c
}

// draCluster: device-plugin node n1 with 2 of its GPUs requested; DRA node
// d1 of 8 GPUs whose claims hold 3 (c1 two and a ComputeDomain channel, c2
// one, which the agent reports allocated too), with a claim of another
// node's pool, an unallocated claim and one with admin access beside;
// DRA node d2 of 4 GPUs and a MIG device, without a NodeTopology, 1 GPU
// claimed.
func draCluster(t *testing.T) []runtime.Object {
	admin := gpuClaim(t, "admin", "gpu.nvidia.com/d1/gpu-5")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	return []runtime.Object{
		hgxNode("n1", "leaf-a"), draNode("d1", "leaf-a"), draNode("d2", "leaf-b"),
		gpuPod("ml", "p1", "n1", 2, corev1.PodRunning),
		draTopology("d1", map[string][]int32{"c2-pod": {2}}),
		gpuSlice("d1", 1, 8, 0), channelSlice("d1"), gpuSlice("d2", 1, 4, 1),
		gpuClaim(t, "c1", "gpu.nvidia.com/d1/gpu-0", "gpu.nvidia.com/d1/gpu-1", computedomain.DriverName+"/d1/channel-0"),
		gpuClaim(t, "c2", "gpu.nvidia.com/d1/gpu-2"),
		gpuClaim(t, "c3", "gpu.nvidia.com/d2/gpu-3"),
		gpuClaim(t, "pending"),
		admin,
	}
}

// failList makes the fake dynamic client fail to list resource with err.
func failList(resource string, err error) func(*dynamicfake.FakeDynamicClient) {
	return func(c *dynamicfake.FakeDynamicClient) {
		c.PrependReactor("list", resource, func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, err
		})
	}
}

func TestTopologyCommandDRA(t *testing.T) {
	claims := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	slices := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}
	// DRA nodes counted as device-plugin nodes are: no GPUs.
	uncounted := `DOMAIN            NODES   GPUS   FREE   UNHEALTHY
cluster           3       8      6      0
  spine=s1        3       8      6      0
    leaf=leaf-a   2       8      6      0
      host=d1     1       0      0      0
      host=n1     1       8      6      <none>
    leaf=leaf-b   1       0      0      <none>
      host=d2     1       0      0      <none>
`
	tests := []struct {
		name       string
		objs       []runtime.Object
		react      func(*dynamicfake.FakeDynamicClient)
		args       []string
		want       string
		wantStderr string
		wantErr    string
	}{{
		name: "tree",
		objs: draCluster(t),
		want: `DOMAIN            NODES   GPUS   FREE   UNHEALTHY
cluster           3       20     14     0
  spine=s1        3       20     14     0
    leaf=leaf-a   2       16     11     0
      host=d1     1       8      5      0
      host=n1     1       8      6      <none>
    leaf=leaf-b   1       4      3      <none>
      host=d2     1       4      3      <none>
`,
	}, {
		name: "json",
		objs: draCluster(t),
		args: []string{"--level", "host", "-o", "json"},
		want: `{
    "levels": [
        "host",
        "leaf",
        "spine",
        "cluster"
    ],
    "domains": [
        {
            "id": "spine=s1/leaf=leaf-a/host=d1",
            "level": "host",
            "name": "d1",
            "nodes": 1,
            "gpus": 8,
            "free": 5,
            "unhealthy": 0
        },
        {
            "id": "spine=s1/leaf=leaf-a/host=n1",
            "level": "host",
            "name": "n1",
            "nodes": 1,
            "gpus": 8,
            "free": 6
        },
        {
            "id": "spine=s1/leaf=leaf-b/host=d2",
            "level": "host",
            "name": "d2",
            "nodes": 1,
            "gpus": 4,
            "free": 3
        }
    ]
}
`,
	}, {
		name:       "claims forbidden",
		objs:       draCluster(t),
		react:      failList("resourceclaims", apierrors.NewForbidden(claims, "", errors.New("no RBAC"))),
		want:       uncounted,
		wantStderr: "Warning: cannot list resourceclaims.resource.k8s.io/v1 (forbidden): the GPUs of nodes NVIDIA's DRA driver serves are not counted\n",
	}, {
		name:       "slices not served",
		objs:       draCluster(t),
		react:      failList("resourceslices", apierrors.NewNotFound(slices, "")),
		want:       uncounted,
		wantStderr: "Warning: cannot list resourceslices.resource.k8s.io/v1 (not served by the cluster): the GPUs of nodes NVIDIA's DRA driver serves are not counted\n",
	}, {
		// Only a node without nvidia.com/gpu can be a DRA node: nothing
		// else is listed.
		name:  "device-plugin nodes only",
		objs:  []runtime.Object{hgxNode("n1", "leaf-a"), gpuPod("ml", "p1", "n1", 2, corev1.PodRunning)},
		react: failList("resourceslices", apierrors.NewForbidden(slices, "", errors.New("no RBAC"))),
		want: `DOMAIN            NODES   GPUS   FREE
cluster           1       8      6
  spine=s1        1       8      6
    leaf=leaf-a   1       8      6
      host=n1     1       8      6
`,
	}, {
		name:    "claims fail otherwise",
		objs:    draCluster(t),
		react:   failList("resourceclaims", apierrors.NewInternalError(errors.New("etcd is down"))),
		wantErr: "listing ResourceClaims: Internal error occurred: etcd is down",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runWith(t, fakeClusterReacting(t, tc.react, tc.objs...), append([]string{"topology"}, tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("topology: %v\n%s", err, stderr)
			}
			if diff := cmp.Diff(tc.want, stdout); diff != "" {
				t.Errorf("stdout (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStderr, stderr); diff != "" {
				t.Errorf("stderr (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestDRAGPUsCount(t *testing.T) {
	zero := draNode("z", "a")
	zero.Status.Allocatable = corev1.ResourceList{lockstep.GPUResource: resource.MustParse("0")}
	noUUIDs := nodeTopology("d", nil, nil)
	replaced := draTopology("d", nil)
	replaced.Spec.GPUs[1].UUID = "GPU-replaced"
	tests := []struct {
		name  string
		nodes []corev1.Node
		objs  []runtime.Object
		want  []capacity.Node
	}{{
		name:  "newest generation",
		nodes: []corev1.Node{*draNode("d", "a")},
		objs:  []runtime.Object{gpuSlice("d", 1, 8, 0), gpuSlice("d", 2, 4, 0), draTopology("d", nil), gpuClaim(t, "c", "gpu.nvidia.com/d/gpu-7", "gpu.nvidia.com/d/gpu-1")},
		want:  []capacity.Node{{Name: "d", Labels: draNode("d", "a").Labels, Allocatable: 4, Requested: 1, Reported: &capacity.Reported{Usable: 8}}},
	}, {
		// Without UUIDs there is nothing to join: whole GPUs' devices
		// count, the MIG device does not.
		name:  "NodeTopology without UUIDs",
		nodes: []corev1.Node{*draNode("d", "a")},
		objs:  []runtime.Object{gpuSlice("d", 1, 2, 1), noUUIDs, gpuClaim(t, "c", "gpu.nvidia.com/d/gpu-0", "gpu.nvidia.com/d/gpu-0-mig-19-0-1")},
		want:  []capacity.Node{{Name: "d", Labels: draNode("d", "a").Labels, Allocatable: 2, Requested: 1, Reported: &capacity.Reported{Usable: 8}}},
	}, {
		// A device whose UUID is none of the NodeTopology's GPUs (nor is a
		// MIG device's) joins no GPU, and its claim holds none.
		name:  "unjoined device",
		nodes: []corev1.Node{*draNode("d", "a")},
		objs:  []runtime.Object{gpuSlice("d", 1, 2, 1), replaced, gpuClaim(t, "c", "gpu.nvidia.com/d/gpu-1")},
		want:  []capacity.Node{{Name: "d", Labels: draNode("d", "a").Labels, Allocatable: 1, Reported: &capacity.Reported{Usable: 8}}},
	}, {
		name:  "allocatable zero and no slice",
		nodes: []corev1.Node{*zero, *draNode("cpu", "a")},
		objs:  []runtime.Object{gpuSlice("z", 1, 2, 0), gpuClaim(t, "c", "gpu.nvidia.com/z/gpu-1")},
		want: []capacity.Node{
			{Name: "z", Labels: zero.Labels, Allocatable: 2, Requested: 1},
			{Name: "cpu", Labels: draNode("cpu", "a").Labels},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := fakeCluster(t, tc.objs...)(genericclioptions.NewConfigFlags(false))
			if err != nil {
				t.Fatal(err)
			}
			dra, warning, err := c.listDRAGPUs(context.Background(), tc.nodes)
			if err != nil || warning != "" {
				t.Fatalf("listDRAGPUs: %q, %v", warning, err)
			}
			topos, err := c.listNodeTopologies(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := capacityNodes(tc.nodes, nil, topos)
			dra.count(got, topos)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("count (-want,+got):\n%s", diff)
			}
		})
	}
}
