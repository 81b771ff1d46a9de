package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// RealAgent publishes the NodeTopology of the node it runs on, from NVML,
// sysfs and the kubelet's pod-resources API.
type RealAgent struct {
	// Client reads the Node and its pods and is used by Publisher.
	Client    client.Client
	Publisher *Publisher
	NodeName  string
	// Backend reads the hardware: discovery.NVMLBackend with the agent's
	// options in production, a fixture in tests.
	Backend discovery.Backend
	// Interval is how often hardware and allocation are read again.
	Interval time.Duration
	// Metrics, when set, count discovery errors by source.
	Metrics *Metrics
}

// Run discovers and publishes until ctx ends. A first discovery that fails
// is fatal, so a misconfigured DaemonSet pod crash-loops with the reason in
// its log (NVML missing, no GPUs); later failures are logged and retried,
// since a running node should keep its last published state.
func (a *RealAgent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.NodeName)
	if a.NodeName == "" {
		return errors.New("no node name: set --node-name or NODE_NAME from the downward API (spec.nodeName)")
	}
	report, err := a.discover(ctx)
	if err != nil {
		return fmt.Errorf("discovering node %s: %w", a.NodeName, err)
	}
	for {
		for _, w := range report.Warnings {
			logger.V(2).Info("Discovery warning", "warning", w)
		}
		wait, err := a.publish(ctx, report)
		if err != nil {
			logger.Error(err, "Publishing NodeTopology failed; retrying")
			wait = min(a.Interval, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(wait, a.Interval)):
		}
		next, err := a.discover(ctx)
		if err != nil {
			logger.Error(err, "Discovery failed; keeping the last published topology")
			continue
		}
		report = next
	}
}

// discover runs Discover and counts the sources it could not read. A
// failed discovery is NVML's: it is the only source discovery cannot do
// without.
func (a *RealAgent) discover(ctx context.Context) (*discovery.Report, error) {
	report, err := a.Backend.Discover(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		a.Metrics.discoveryFailed(discovery.SourceNVML)
	case err == nil:
		a.Metrics.discoveryFailed(report.Unavailable...)
	}
	return report, err
}

func (a *RealAgent) publish(ctx context.Context, report *discovery.Report) (time.Duration, error) {
	node := &corev1.Node{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: a.NodeName}, node); err != nil {
		return 0, fmt.Errorf("getting node %s: %w", a.NodeName, err)
	}
	// The pod-resources API names pods but gives no UID, which allocations
	// are keyed by: look the node's pods up.
	var pods corev1.PodList
	if err := a.Client.List(ctx, &pods, client.MatchingFields{"spec.nodeName": a.NodeName}); err != nil {
		return 0, fmt.Errorf("listing pods on %s: %w", a.NodeName, err)
	}
	uids := make(map[string]string, len(pods.Items))
	for _, p := range pods.Items {
		uids[p.Namespace+"/"+p.Name] = string(p.UID)
	}
	// Devices prepared for claims are GPUs once joined to the node's
	// ResourceSlice by UUID. Without the slice they stay unresolved, as a
	// MIG device does: the scheduler reads claims itself.
	resolved := *report
	gpuOf, err := claimDeviceGPUs(ctx, a.Client, a.NodeName, &report.Topology, report.Allocations)
	if err != nil {
		klog.FromContext(ctx).Error(err, "GPUs held through ResourceClaims left out of the allocations", "node", a.NodeName)
	}
	var unresolved []string
	resolved.Allocations, unresolved = discovery.ResolveClaimDevices(report.Allocations, a.NodeName, gpuOf)
	if len(unresolved) > 0 && err == nil {
		klog.FromContext(ctx).V(2).Info("Devices prepared for claims that are no GPU of the node's ResourceSlice", "node", a.NodeName, "devices", unresolved)
	}
	spec, status := FromReport(&resolved, uids)
	if report.DynamicResources != nil {
		status.Conditions = []metav1.Condition{DynamicResourcesCondition(pods.Items, report.DynamicResources)}
	}
	return a.Publisher.Publish(ctx, node, spec, status)
}

// FromReport turns a discovery report into the NodeTopology spec and status.
// podUIDs maps "namespace/name" to UID for the pods on the node; allocations
// of pods not in it (already gone) are dropped.
func FromReport(report *discovery.Report, podUIDs map[string]string) (v1alpha1.NodeTopologySpec, v1alpha1.NodeTopologyStatus) {
	spec := v1alpha1.SpecFromTopology(&report.Topology, matchProfile(&report.Topology))
	hcas := make(map[string]discovery.HCA, len(report.HCAs))
	for _, h := range report.HCAs {
		hcas[h.Name] = h
	}
	for i := range spec.NICs {
		h, ok := hcas[spec.NICs[i].Name]
		if !ok {
			continue
		}
		spec.NICs[i].GUID, spec.NICs[i].PCIBusID = h.NodeGUID, h.PCIAddress
		for _, p := range h.Ports {
			if p.Active() || spec.NICs[i].State == "" {
				spec.NICs[i].State = p.State
			}
		}
	}

	var status v1alpha1.NodeTopologyStatus
	for _, h := range report.GPUHealth {
		if h.State == discovery.GPUHealthy {
			continue
		}
		status.GPUHealth = append(status.GPUHealth, v1alpha1.GPUHealth{
			Index: int32(h.Index), State: v1alpha1.GPUHealthState(h.State), Message: truncate(h.Reason, 512),
		})
	}
	// One allocation per pod: the kubelet reports GPUs per container.
	podIndex := map[string]int{}
	var held topology.GPUSet
	for _, alloc := range report.Allocations {
		key := alloc.Namespace + "/" + alloc.Pod
		uid, ok := podUIDs[key]
		if !ok {
			continue
		}
		var gpus []int32
		for _, g := range alloc.GPUs {
			if !held.Has(g) {
				held |= topology.NewGPUSet(g)
				gpus = append(gpus, int32(g))
			}
		}
		if len(gpus) == 0 {
			continue
		}
		i, seen := podIndex[key]
		if !seen {
			i = len(status.Allocations)
			podIndex[key] = i
			status.Allocations = append(status.Allocations, v1alpha1.GPUAllocation{Namespace: alloc.Namespace, Pod: alloc.Pod, PodUID: uid})
		}
		status.Allocations[i].GPUs = append(status.Allocations[i].GPUs, gpus...)
	}
	status.FreeGPUs = int32((report.UsableGPUs() &^ held).Len())
	return spec, status
}

// matchProfile names the built-in profile whose GPUs and link matrix the
// node has, or "" for hardware no profile describes.
func matchProfile(node *topology.NodeTopology) string {
	for _, p := range topology.Profiles() {
		if p.GPUCount != len(node.GPUs) || labelValue(node.GPUs[0].Product) != p.GPUProduct {
			continue
		}
		want, err := p.Node()
		if err != nil {
			continue
		}
		same := true
		for i := range want.Links {
			for j := range want.Links[i] {
				if want.Links[i][j].Class != node.Links[i][j].Class || want.Links[i][j].NVLinks != node.Links[i][j].NVLinks {
					same = false
				}
			}
		}
		if same {
			return p.Name
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
