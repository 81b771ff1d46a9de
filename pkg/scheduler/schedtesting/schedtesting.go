// Package schedtesting builds the nodes, NodeTopology objects and DRA
// objects the scheduler packages' tests share.
package schedtesting

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// GPUNode is a node with gpus nvidia.com/gpu allocatable (0 for a node
// whose GPUs a DRA driver serves), and room for anything else.
func GPUNode(name string, gpus int64) *v1.Node {
	capacity := v1.ResourceList{
		v1.ResourceCPU:       resource.MustParse("100"),
		v1.ResourceMemory:    resource.MustParse("1Ti"),
		v1.ResourcePods:      resource.MustParse("110"),
		lockstep.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: capacity, Capacity: capacity}}
}

// NodeInfo is the scheduler's NodeInfo of node running pods.
func NodeInfo(node *v1.Node, pods ...*v1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// HGXNodeTopology is the NodeTopology of an HGX H100 node (8 GPUs on
// NVSwitch) named name, as its agent publishes it.
func HGXNodeTopology(t testing.TB, name string) *v1alpha1.NodeTopology {
	t.Helper()
	prof, _ := topology.LookupProfile("hgx-h100")
	hw, err := prof.Node()
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SpecFromTopology(hw, prof.Name)}
}

// DRANodeTopology is HGXNodeTopology with the GPU UUIDs the fake agent
// gives them, which GPUSlice's devices carry.
func DRANodeTopology(t testing.TB, name string) *v1alpha1.NodeTopology {
	t.Helper()
	nt := HGXNodeTopology(t, name)
	for i := range nt.Spec.GPUs {
		nt.Spec.GPUs[i].UUID = fmt.Sprintf("GPU-fake-%s-%d", name, i)
	}
	return nt
}

// GPUSlice is node's gpu.nvidia.com ResourceSlice: device gpu-<i> with the
// UUID of GPU i (DRANodeTopology), for each i in gpus.
func GPUSlice(node string, gpus ...int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
		Spec: resourcev1.ResourceSliceSpec{Driver: lockstep.DRAGPUDriver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	for _, i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				lockstep.DRAUUIDAttribute: {StringValue: ptr.To(fmt.Sprintf("GPU-fake-%s-%d", node, i))},
			}})
	}
	return s
}

// FakeDRA is the DRA objects a scheduler's informers would serve
// (nodeview.Source), fixed by the test: claims and templates by
// namespace/name, the ResourceSlices, and the devices allocated to claims.
type FakeDRA struct {
	Claims    map[string]*resourcev1.ResourceClaim
	Templates map[string]*resourcev1.ResourceClaimTemplate
	GPUSlices []*resourcev1.ResourceSlice
	Devices   sets.Set[structured.DeviceID]
}

func (f *FakeDRA) Claim(ns, name string) (*resourcev1.ResourceClaim, error) {
	if c, ok := f.Claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaims"), name)
}

func (f *FakeDRA) Template(ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	if t, ok := f.Templates[ns+"/"+name]; ok {
		return t, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaimtemplates"), name)
}

func (f *FakeDRA) Slices() ([]*resourcev1.ResourceSlice, error) { return f.GPUSlices, nil }

func (f *FakeDRA) Allocated() (sets.Set[structured.DeviceID], error) { return f.Devices, nil }

// HGXCluster is the cluster of the plan benchmarks: n HGX H100 nodes, 32
// to a leaf and 512 to a spine, with their NodeTopology objects and
// NodeInfos. Loaded, each node runs a pod holding a random 0-8 of its GPUs
// (the same ones every call: the seed is fixed), which its NodeTopology
// reports.
func HGXCluster(b testing.TB, n int, loaded bool) ([]*v1alpha1.NodeTopology, []fwk.NodeInfo) {
	b.Helper()
	rng := rand.New(rand.NewPCG(42, 0))
	nts := make([]*v1alpha1.NodeTopology, n)
	infos := make([]fwk.NodeInfo, n)
	for i := range infos {
		node := GPUNode(fmt.Sprintf("node-%04d", i), 8)
		node.Labels = map[string]string{
			lockstep.LabelFabricTier0:      fmt.Sprintf("leaf-%d", i/32),
			lockstep.LabelFabricTier1:      fmt.Sprintf("spine-%d", i/512),
			lockstep.LabelNVIDIAGPUProduct: "NVIDIA-H100-80GB-HBM3",
		}
		nt := HGXNodeTopology(b, node.Name)
		var pods []*v1.Pod
		if used := rng.IntN(9); loaded && used > 0 {
			busy := utiltesting.MakePod(fmt.Sprintf("busy-%d", i), "ns").GPUs(int64(used)).Obj()
			busy.UID = types.UID(busy.Name)
			busy.Spec.NodeName = node.Name
			a := v1alpha1.GPUAllocation{Namespace: "ns", Pod: busy.Name, PodUID: string(busy.UID)}
			for _, g := range rng.Perm(8)[:used] {
				a.GPUs = append(a.GPUs, int32(g))
			}
			nt.Status.Allocations = []v1alpha1.GPUAllocation{a}
			pods = append(pods, busy)
		}
		nts[i] = nt
		infos[i] = NodeInfo(node, pods...)
	}
	return nts, infos
}

// ClaimPod is a member of PodGroup g in namespace ns whose pod claim
// "gpus" comes from template tmpl.
func ClaimPod(name, tmpl string) *v1.Pod {
	pod := utiltesting.MakePod(name, "ns").PodGroup("g").Obj()
	pod.UID = types.UID("uid-" + name)
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(tmpl)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpus"}}
	return pod
}

// HGXNodeTopologyAt is HGXNodeTopology whose agent last heartbeated at beat.
func HGXNodeTopologyAt(t testing.TB, name string, beat time.Time) *v1alpha1.NodeTopology {
	nt := HGXNodeTopology(t, name)
	nt.Status.HeartbeatTime = metav1.NewTime(beat)
	return nt
}

// Malformed breaks a NodeTopology the way the CRD's CEL rules let through
// (they check NVLink counts only on NVLink classes): a PCIe link that
// claims NVLinks.
func Malformed(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
	nt.Spec.Links[0].Class, nt.Spec.Links[0].NVLinks = "PIX", 4
	return nt
}

// Events returns the events r recorded so far, as "Type Reason note".
func Events(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// WithAllocation is node's HGXNodeTopology with GPUs 0-3 held by a pod.
func WithAllocation(t testing.TB, node string) *v1alpha1.NodeTopology {
	nt := HGXNodeTopology(t, node)
	nt.Status.Allocations = []v1alpha1.GPUAllocation{{Pod: "busy", Namespace: "other", PodUID: "uid-busy", GPUs: []int32{0, 1, 2, 3}}}
	return nt
}
