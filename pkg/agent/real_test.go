package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func hgxReport(t *testing.T) *discovery.Report {
	t.Helper()
	p, _ := topology.LookupProfile("hgx-h100")
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	report := &discovery.Report{Topology: *node}
	for i := range node.GPUs {
		// NVML names the product with spaces; the profile uses the label form.
		report.Topology.GPUs[i].Product = "NVIDIA H100 80GB HBM3"
		report.GPUHealth = append(report.GPUHealth, discovery.GPUHealth{Index: i, State: discovery.GPUHealthy})
	}
	report.GPUHealth[7] = discovery.GPUHealth{Index: 7, State: discovery.GPULost, Reason: "GPU 7: nvmlDeviceGetUUID: NVML_ERROR_GPU_IS_LOST"}
	report.HCAs = []discovery.HCA{{Name: "mlx5_0", NodeGUID: "b83f:d203:00a1:2b3c", PCIAddress: "0000:1a:00.0",
		Ports: []discovery.HCAPort{{Number: 1, State: "ACTIVE", RateGbps: 400}}}}
	report.Allocations = []discovery.Allocation{
		{Namespace: "ml", Pod: "train-0", Container: "main", GPUs: []int{0, 1}},
		{Namespace: "ml", Pod: "train-0", Container: "sidecar", GPUs: []int{2}},
		{Namespace: "ml", Pod: "gone", Container: "main", GPUs: []int{3}},
	}
	return report
}

func TestFromReport(t *testing.T) {
	spec, status := FromReport(hgxReport(t), map[string]string{"ml/train-0": "uid-1"})
	if spec.Profile != "hgx-h100" {
		t.Errorf("profile = %q, want hgx-h100 matched by product and link matrix", spec.Profile)
	}
	if spec.NICs[0].GUID != "b83f:d203:00a1:2b3c" || spec.NICs[0].State != "ACTIVE" || spec.NICs[0].PCIBusID != "0000:1a:00.0" {
		t.Errorf("NIC mlx5_0 = %+v, want sysfs facts merged in", spec.NICs[0])
	}
	want := v1alpha1.NodeTopologyStatus{
		// 8 GPUs, GPU 7 lost, 0-2 held by train-0; the pod that is gone holds nothing.
		FreeGPUs: 4,
		GPUHealth: []v1alpha1.GPUHealth{{Index: 7, State: v1alpha1.GPULost,
			Message: "GPU 7: nvmlDeviceGetUUID: NVML_ERROR_GPU_IS_LOST"}},
		Allocations: []v1alpha1.GPUAllocation{{Namespace: "ml", Pod: "train-0", PodUID: "uid-1", GPUs: []int32{0, 1, 2}}},
	}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("status (-want,+got):\n%s", diff)
	}
}

func TestFromReportUnknownHardware(t *testing.T) {
	report := hgxReport(t)
	report.Topology.Links[0][1].NVLinks, report.Topology.Links[1][0].NVLinks = 12, 12
	if spec, _ := FromReport(report, nil); spec.Profile != "" {
		t.Errorf("profile = %q for a link matrix no profile has, want none", spec.Profile)
	}
}

// backendFunc is a discovery.Backend made of a function.
type backendFunc func(context.Context) (*discovery.Report, error)

func (f backendFunc) Discover(ctx context.Context) (*discovery.Report, error) { return f(ctx) }

func TestRealAgentFailsFastWithoutNVML(t *testing.T) {
	a := &RealAgent{NodeName: "gpu-0", Backend: backendFunc(func(context.Context) (*discovery.Report, error) {
		return nil, discovery.ErrNVMLNotFound
	})}
	err := a.Run(context.Background())
	if !errors.Is(err, discovery.ErrNVMLNotFound) || !strings.Contains(err.Error(), "--mode=fake") {
		t.Errorf("Run = %v, want the actionable NVML error", err)
	}
	a.NodeName = ""
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("Run without a node name = %v, want it to say how to set one", err)
	}
}
