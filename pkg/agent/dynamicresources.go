package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// DynamicResourcesCondition says whether a node's kubelet reports the
// devices it prepared for ResourceClaims, from the evidence one read
// gives: the node's pods as the API has them, and listed, each container
// the kubelet's pod-resources answer lists ("namespace/pod/container")
// with whether it listed devices prepared for its claims
// (discovery.PodResources.DynamicResources). Only a running container
// whose spec uses a claim and that the kubelet lists tells: the kubelet
// lists claims' devices for every such container when it serves them, and
// for none when its KubeletPodResourcesDynamicResources feature is off.
// No such container leaves the question open (Unknown): nothing is missed
// then either.
func DynamicResourcesCondition(pods []corev1.Pod, listed map[string]bool) metav1.Condition {
	var using, reported int
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			if len(c.Resources.Claims) == 0 {
				continue
			}
			got, ok := listed[p.Namespace+"/"+p.Name+"/"+c.Name]
			if !ok {
				// Not (or no longer) the kubelet's: no evidence.
				continue
			}
			using++
			if got {
				reported++
			}
		}
	}
	c := metav1.Condition{Type: v1alpha1.NodeTopologyDynamicResourcesReported}
	switch {
	case using == 0:
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.ReasonNoClaimedContainers
		c.Message = "no running container of the node uses a ResourceClaim, so nothing shows whether the kubelet reports the devices it prepares for claims"
	case reported > 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonKubeletReportsDynamicResources
		c.Message = fmt.Sprintf("the kubelet's pod-resources API reports the devices prepared for claims (%d of %d running containers that use claims listed)", reported, using)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonKubeletOmitsDynamicResources
		c.Message = fmt.Sprintf("%d running containers use ResourceClaims and the kubelet's pod-resources API lists the devices of none: "+
			"its KubeletPodResourcesDynamicResources feature is off (alpha before Kubernetes 1.34, on by default since), "+
			"so allocations and freeGPUs here leave out GPUs held through DRA; the scheduler reads them from the claims", using)
	}
	return c
}

// withTransitionTimes returns conds with each condition's
// lastTransitionTime kept from old when its status did not change, and now
// otherwise, as meta.SetStatusCondition keeps it.
func withTransitionTimes(old, conds []metav1.Condition, now time.Time) []metav1.Condition {
	if conds == nil {
		return nil
	}
	out := make([]metav1.Condition, 0, len(conds))
	for _, c := range conds {
		c.LastTransitionTime = metav1.NewTime(now)
		if prev := meta.FindStatusCondition(old, c.Type); prev != nil && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// claimDeviceGPUs returns the join of node's GPU DRA devices to its GPUs
// (device name to NVML index) when an allocation of report names claim
// devices, from the node's ResourceSlices of the GPU driver: NVIDIA's
// driver names a device after its minor number, and only the slice's uuid
// attribute says which GPU it is. nil when no allocation needs it.
func claimDeviceGPUs(ctx context.Context, c client.Client, node string, hw *topology.NodeTopology, allocs []discovery.Allocation) (map[string]int, error) {
	need := false
	for _, a := range allocs {
		need = need || len(a.ClaimDevices) > 0
	}
	if !need {
		return nil, nil
	}
	var list resourcev1.ResourceSliceList
	// The server filters by node and driver: an agent per node must not
	// read every node's slices.
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": node, "spec.driver": lockstep.DRAGPUDriver}); err != nil {
		return nil, fmt.Errorf("listing the %s ResourceSlices of node %s: %w", lockstep.DRAGPUDriver, node, err)
	}
	slices := make([]*resourcev1.ResourceSlice, 0, len(list.Items))
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.Driver == lockstep.DRAGPUDriver && s.Spec.NodeName != nil && *s.Spec.NodeName == node && s.Spec.Pool.Name == node {
			slices = append(slices, s)
		}
	}
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	return topology.JoinDRADevices(hw, lockstep.DRAGPUDriver, gpuclaim.SliceDevices(slices...)).GPUs, nil
}
