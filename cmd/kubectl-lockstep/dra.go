package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

// draGPUs is what the GPUs of DRA nodes are counted from: nodes that
// advertise no nvidia.com/gpu because NVIDIA's DRA driver publishes their
// GPUs in ResourceSlices, and the devices ResourceClaims were allocated.
type draGPUs struct {
	// slices are each DRA node's ResourceSlices of the GPU driver, of the
	// newest generation: older ones are being replaced.
	slices map[string][]*resourcev1.ResourceSlice
	// allocations are the allocations of the claims that hold GPU driver
	// devices, by the devices' pool; each claim appears once per pool.
	allocations map[string][]*resourcev1.AllocationResult
}

// listDRAGPUs reads the GPU driver's ResourceSlices and the allocated
// ResourceClaims, when some node advertises no nvidia.com/gpu and could be
// a DRA node. It returns nil without DRA nodes. When either cannot be read
// (the user may not list them, or the cluster does not serve
// resource.k8s.io/v1) it returns nil and a warning instead of an error:
// DRA nodes then count no GPUs, as device-plugin nodes count theirs.
func (c *cluster) listDRAGPUs(ctx context.Context, nodes []corev1.Node) (*draGPUs, string, error) {
	candidates := map[string]bool{}
	for _, n := range nodes {
		if alloc := n.Status.Allocatable[lockstep.GPUResource]; alloc.IsZero() {
			candidates[n.Name] = true
		}
	}
	if len(candidates) == 0 {
		return nil, "", nil
	}
	list, err := c.dynamic.Resource(resourceSlicesResource()).List(ctx, metav1.ListOptions{})
	if warning, ok := unreadableWarning(resourceSlicesResource(), err); ok {
		return nil, warning, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing ResourceSlices: %w", err)
	}
	d := &draGPUs{slices: map[string][]*resourcev1.ResourceSlice{}, allocations: map[string][]*resourcev1.AllocationResult{}}
	for i := range list.Items {
		s := &resourcev1.ResourceSlice{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, s); err != nil {
			return nil, "", fmt.Errorf("decoding ResourceSlice %s: %w", list.Items[i].GetName(), err)
		}
		if s.Spec.Driver != lockstep.DRAGPUDriver || s.Spec.NodeName == nil || !candidates[*s.Spec.NodeName] {
			continue
		}
		d.slices[*s.Spec.NodeName] = newestGeneration(d.slices[*s.Spec.NodeName], s)
	}
	if len(d.slices) == 0 {
		return nil, "", nil
	}
	claims, err := c.dynamic.Resource(resourceClaimsResource()).Namespace("").List(ctx, metav1.ListOptions{})
	if warning, ok := unreadableWarning(resourceClaimsResource(), err); ok {
		return nil, warning, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing ResourceClaims: %w", err)
	}
	for i := range claims.Items {
		claim := &resourcev1.ResourceClaim{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(claims.Items[i].Object, claim); err != nil {
			return nil, "", fmt.Errorf("decoding ResourceClaim %s/%s: %w", claims.Items[i].GetNamespace(), claims.Items[i].GetName(), err)
		}
		alloc := claim.Status.Allocation
		if alloc == nil {
			continue
		}
		pools := map[string]bool{}
		for _, r := range alloc.Devices.Results {
			if r.Driver == lockstep.DRAGPUDriver && !pools[r.Pool] {
				pools[r.Pool] = true
				d.allocations[r.Pool] = append(d.allocations[r.Pool], alloc)
			}
		}
	}
	return d, "", nil
}

// newestGeneration adds s to a node's slices, keeping only those of the
// newest pool generation, as the scheduler does.
func newestGeneration(slices []*resourcev1.ResourceSlice, s *resourcev1.ResourceSlice) []*resourcev1.ResourceSlice {
	switch {
	case len(slices) == 0 || s.Spec.Pool.Generation > slices[0].Spec.Pool.Generation:
		return []*resourcev1.ResourceSlice{s}
	case s.Spec.Pool.Generation == slices[0].Spec.Pool.Generation:
		return append(slices, s)
	}
	return slices
}

// unreadableWarning returns the warning to print when err says that
// resource cannot be listed here at all: forbidden, or not served by the
// cluster.
func unreadableWarning(resource schema.GroupVersionResource, err error) (string, bool) {
	why := ""
	switch {
	case err == nil:
		return "", false
	case apierrors.IsForbidden(err):
		why = "forbidden"
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		why = "not served by the cluster"
	default:
		return "", false
	}
	return fmt.Sprintf("Warning: cannot list %s.%s/%s (%s): the GPUs of nodes NVIDIA's DRA driver serves are not counted",
		resource.Resource, resource.Group, resource.Version, why), true
}

// count sets the GPUs of the DRA nodes among nodes (capacityNodes' count
// of them, in the same order) as the scheduler counts them: the GPUs the
// node's devices are, less those allocated claims hold. Requested counts
// claims, not pod requests, since the agent may report a claim's GPUs late
// or never (a kubelet that does not serve DynamicResources); Reported
// stays the agent's. A nil d counts nothing.
func (d *draGPUs) count(nodes []capacity.Node, topos map[string]*v1alpha1.NodeTopology) {
	if d == nil {
		return
	}
	for i := range nodes {
		n := &nodes[i]
		slices, ok := d.slices[n.Name]
		if !ok {
			continue
		}
		gpuOf := deviceGPUs(slices, topos[n.Name])
		var held topology.GPUSet
		for _, alloc := range d.allocations[n.Name] {
			// Devices that join no GPU (a MIG device) are not among the
			// node's GPUs counted, so they hold none of them.
			gpus, _ := gpuclaim.NodeGPUs(alloc, n.Name, gpuOf)
			held |= gpus
		}
		n.Allocatable, n.Requested = len(gpuOf), held.Len()
	}
}

// deviceGPUs maps the names of a DRA node's GPU devices to GPU indexes: the
// devices joined by UUID to the GPUs of its NodeTopology, as the scheduler
// joins them. Without a NodeTopology that knows its GPUs' UUIDs there is
// nothing to join: each whole GPU's device is then a GPU of its own,
// numbered in slice order.
func deviceGPUs(slices []*resourcev1.ResourceSlice, nt *v1alpha1.NodeTopology) map[string]int {
	if uuids := gpuUUIDs(nt); uuids != nil {
		// UUIDs by position, as the scheduler keeps them: the spec lists
		// the GPUs by NVML index.
		hw := &topology.NodeTopology{GPUs: make([]topology.GPU, len(uuids))}
		for i, u := range uuids {
			hw.GPUs[i].UUID = u
		}
		gpus := topology.JoinDRADevices(hw, lockstep.DRAGPUDriver, gpuclaim.SliceDevices(slices...)).GPUs
		for name, g := range gpus {
			// A GPUSet holds no more; the scheduler drops them too.
			if g >= topology.MaxGPUs {
				delete(gpus, name)
			}
		}
		return gpus
	}
	gpus := map[string]int{}
	for _, s := range slices {
		for _, dev := range s.Spec.Devices {
			a, ok := dev.Attributes[lockstep.DRATypeAttribute]
			if !ok || a.StringValue == nil || *a.StringValue != lockstep.DRATypeGPU {
				continue
			}
			if _, seen := gpus[dev.Name]; !seen && len(gpus) < topology.MaxGPUs {
				gpus[dev.Name] = len(gpus)
			}
		}
	}
	return gpus
}

// gpuUUIDs returns the UUIDs of a NodeTopology's GPUs by position, nil
// without a NodeTopology or when it knows none.
func gpuUUIDs(nt *v1alpha1.NodeTopology) []string {
	if nt == nil {
		return nil
	}
	uuids := make([]string, len(nt.Spec.GPUs))
	known := false
	for i, g := range nt.Spec.GPUs {
		uuids[i] = g.UUID
		known = known || g.UUID != ""
	}
	if !known {
		return nil
	}
	return uuids
}
