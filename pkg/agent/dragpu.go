package agent

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// The software a simulated DRA node runs. They are not hardware facts, but
// NVIDIA's driver publishes them on every GPU, so the fake world picks one
// release that supports every profile (R570 is the last branch with Volta
// and the first with Blackwell).
const (
	fakeDriverVersion     = "570.148.08"
	fakeCUDADriverVersion = "12.8"
)

// IsDRANode reports whether NVIDIA's DRA driver, not its device plugin,
// serves the GPUs of a simulated node (the cluster model's gpuDriver: DRA).
func IsDRANode(node *corev1.Node) bool {
	return node.Labels[lockstep.LabelGPUDriver] == lockstep.GPUDriverDRA
}

// GPUSliceName is the name of the fake agent's gpu.nvidia.com ResourceSlice
// of a node. NVIDIA's kubelet plugin lets the apiserver generate the name
// from "<node>-gpu.nvidia.com-"; a fixed name makes a second create of one
// slice, from a reconcile that ran before the cache saw the first, fail
// instead of publishing the node's GPUs twice. Nothing reads slices by name.
func GPUSliceName(node string) string {
	return node + "-" + lockstep.DRAGPUDriver
}

// GPUResourceSlice returns the ResourceSlice NVIDIA's GPU kubelet plugin
// publishes for a node with hardware hw of a profile with GPU identity id:
// one slice, the node's own pool (named after the node), and for each GPU
// device gpu-<minor> with the plugin's attributes and memory capacity. The
// simulated minor number is the NVML index. Generation is 1, what the
// kubelet plugin's first publication gets.
func GPUResourceSlice(node *corev1.Node, hw *topology.NodeTopology, id topology.GPUIdentity) *resourcev1.ResourceSlice {
	devices := make([]resourcev1.Device, len(hw.GPUs))
	for i, g := range hw.GPUs {
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			lockstep.DRATypeAttribute: {StringValue: ptr(lockstep.DRATypeGPU)},
			"uuid":                    {StringValue: ptr(g.UUID)},
			"productName":             {StringValue: ptr(id.Name)},
			"brand":                   {StringValue: ptr(id.Brand)},
			"architecture":            {StringValue: ptr(id.Architecture)},
			"cudaComputeCapability":   {VersionValue: ptr(semver(id.ComputeCapability))},
			"driverVersion":           {VersionValue: ptr(semver(fakeDriverVersion))},
			"cudaDriverVersion":       {VersionValue: ptr(semver(fakeCUDADriverVersion))},
			"pcieBusID":               {StringValue: ptr(nvlibBusID(g.PCIBusID))},
			"addressingMode":          {StringValue: ptr(id.AddressingMode)},
		}
		if i < len(id.PCIeRoots) {
			attrs[lockstep.DRAPCIeRootAttribute] = resourcev1.DeviceAttribute{StringValue: ptr(id.PCIeRoots[i])}
		}
		devices[i] = resourcev1.Device{
			Name:       lockstep.DRAGPUDevicePrefix + strconv.Itoa(g.Index),
			Attributes: attrs,
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(int64(g.MemoryMiB)<<20, resource.BinarySI)},
			},
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: GPUSliceName(node.Name),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr(true),
			}},
		},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   lockstep.DRAGPUDriver,
			Pool:     resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr(node.Name),
			Devices:  devices,
		},
	}
}

// semver writes a dotted version as the semantic version NVIDIA's driver
// publishes (Masterminds/semver's String): three numeric parts without
// leading zeros, so driver 570.148.08 is 570.148.8 and CUDA 12.8 is 12.8.0.
func semver(v string) string {
	parts := strings.Split(v, ".")
	out := make([]string, 3)
	for i := range out {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		out[i] = strconv.Itoa(n)
	}
	return strings.Join(out, ".")
}

// nvlibBusID writes NVML's bus id ("00000000:2A:00.0") as go-nvlib's
// GetPCIBusID does, which is what the driver publishes: lower case, the
// 8-digit domain cut to 4 ("0000:2a:00.0").
func nvlibBusID(nvml string) string {
	id := strings.ToLower(nvml)
	if id != "0000" {
		id = strings.TrimPrefix(id, "0000")
	}
	return id
}

// ensureGPUSlice makes the node's gpu.nvidia.com ResourceSlice the desired
// one. An unchanged slice is not written, so a restarted agent rewrites
// nothing; a changed one is updated in place under its generation, as the
// kubelet plugin's publisher does when one update suffices.
func (r *FakeReconciler) ensureGPUSlice(ctx context.Context, want *resourcev1.ResourceSlice) error {
	logger := klog.FromContext(ctx)
	have := &resourcev1.ResourceSlice{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: want.Name}, have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			// A create the cache has not shown yet: its event brings the
			// node back.
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return fmt.Errorf("creating ResourceSlice %s: %w", want.Name, err)
		}
		logger.V(2).Info("Created ResourceSlice", "slice", klog.KObj(want), "devices", len(want.Spec.Devices))
		return nil
	case err != nil:
		return fmt.Errorf("getting ResourceSlice %s: %w", want.Name, err)
	}
	want.Spec.Pool.Generation = max(have.Spec.Pool.Generation, 1)
	if apiequality.Semantic.DeepEqual(have.Spec, want.Spec) && apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) {
		return nil
	}
	next := have.DeepCopy()
	next.Spec = want.Spec
	next.OwnerReferences = want.OwnerReferences
	if err := r.Client.Update(ctx, next); err != nil {
		return fmt.Errorf("updating ResourceSlice %s: %w", want.Name, err)
	}
	logger.V(2).Info("Updated ResourceSlice", "slice", klog.KObj(next), "devices", len(next.Spec.Devices))
	return nil
}

// deleteGPUSlice removes the ResourceSlice of a node the agent no longer
// serves through DRA: a deleted node (ahead of the garbage collector), one
// no longer selected, or one moved to the device plugin. It asks the cache
// first, so nodes that never had a slice cost no request.
func (r *FakeReconciler) deleteGPUSlice(ctx context.Context, node string) error {
	slice := &resourcev1.ResourceSlice{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: GPUSliceName(node)}, slice); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting ResourceSlice %s: %w", GPUSliceName(node), err)
	}
	if err := r.Client.Delete(ctx, slice); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ResourceSlice %s: %w", slice.Name, err)
	}
	return nil
}

// claimAllocations emulates the GPU kubelet plugin preparing the claims of
// the pods bound to a DRA node: each pod that still holds GPUs gets the
// GPUs its allocated claims name (gpu.nvidia.com devices of the node's
// pool), joined to the node's GPU indexes by UUID through the slice the
// agent publishes. Devices of other drivers (compute-domain channels) and
// other pools are not the node's GPUs. A claim not yet allocated has
// nothing to prepare; a device the slice does not publish is a problem, as
// a real plugin would fail to prepare it.
func (r *FakeReconciler) claimAllocations(ctx context.Context, node string, hw *topology.NodeTopology, slice *resourcev1.ResourceSlice, pods []*corev1.Pod) ([]v1alpha1.GPUAllocation, []AllocationProblem, error) {
	devices := make([]topology.DRADevice, len(slice.Spec.Devices))
	for i, d := range slice.Spec.Devices {
		devices[i] = topology.DRADevice{Driver: slice.Spec.Driver, Name: d.Name, UUID: deref(d.Attributes[lockstep.DRAUUIDAttribute].StringValue)}
	}
	gpuOf := topology.JoinDRADevices(hw, lockstep.DRAGPUDriver, devices).GPUs

	var (
		allocs   []v1alpha1.GPUAllocation
		problems []AllocationProblem
	)
	for _, pod := range pods {
		if !HoldsGPUs(pod) || len(pod.Spec.ResourceClaims) == 0 {
			continue
		}
		var set topology.GPUSet
		for i := range pod.Spec.ResourceClaims {
			claim, err := r.podClaim(ctx, pod, &pod.Spec.ResourceClaims[i])
			if err != nil {
				return nil, nil, err
			}
			if claim == nil || claim.Status.Allocation == nil {
				continue
			}
			for _, res := range claim.Status.Allocation.Devices.Results {
				if res.Driver != lockstep.DRAGPUDriver || res.Pool != node {
					continue
				}
				gpu, ok := gpuOf[res.Device]
				if !ok {
					problems = append(problems, AllocationProblem{Pod: pod, Reason: fmt.Sprintf(
						"ResourceClaim %s names device %s, which the node's %s ResourceSlice does not publish", claim.Name, res.Device, lockstep.DRAGPUDriver)})
					continue
				}
				set |= topology.NewGPUSet(gpu)
			}
		}
		if set != 0 {
			allocs = append(allocs, v1alpha1.GPUAllocation{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), GPUs: toInt32s(set)})
		}
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].PodUID < allocs[j].PodUID })
	return allocs, problems, nil
}

// podClaim returns the ResourceClaim a pod's claim entry stands for, or nil
// when there is none (yet): a template's claim not created, or a claim of
// that name that is not the pod's.
func (r *FakeReconciler) podClaim(ctx context.Context, pod *corev1.Pod, podClaim *corev1.PodResourceClaim) (*resourcev1.ResourceClaim, error) {
	name, mustCheckOwner, err := resourceclaim.Name(pod, podClaim)
	if err != nil || name == nil {
		// The template's claim is not in the pod's status yet, or the
		// template produced none.
		return nil, nil
	}
	claim := &resourcev1.ResourceClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: *name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting ResourceClaim %s/%s of pod %s: %w", pod.Namespace, *name, pod.Name, err)
	}
	if mustCheckOwner && resourceclaim.IsForPod(pod, claim) != nil {
		return nil, nil
	}
	return claim, nil
}

// freeGPUs counts the GPUs no allocation holds. Claims may be shared by
// pods, so a GPU can be in several allocations and is counted once.
func freeGPUs(hw *topology.NodeTopology, allocs []v1alpha1.GPUAllocation) int {
	var held topology.GPUSet
	for _, a := range allocs {
		held |= toGPUSet(a.GPUs)
	}
	return (hw.AllGPUs() &^ held).Len()
}

// claimNodes maps a ResourceClaim to the nodes whose GPUs it was allocated:
// the pools of its gpu.nvidia.com results, which are node names.
func claimNodes(_ context.Context, obj client.Object) []reconcile.Request {
	claim := obj.(*resourcev1.ResourceClaim)
	if claim.Status.Allocation == nil {
		return nil
	}
	var reqs []reconcile.Request
	seen := map[string]bool{}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver == lockstep.DRAGPUDriver && !seen[res.Pool] {
			seen[res.Pool] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: res.Pool}})
		}
	}
	return reqs
}

// sliceNode maps a gpu.nvidia.com ResourceSlice to its node, so a slice
// changed or deleted by someone else is put back.
func sliceNode(_ context.Context, obj client.Object) []reconcile.Request {
	slice := obj.(*resourcev1.ResourceSlice)
	if slice.Spec.Driver != lockstep.DRAGPUDriver || slice.Spec.NodeName == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: *slice.Spec.NodeName}}}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
