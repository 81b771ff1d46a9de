package discovery

import (
	"context"
	"errors"
	"fmt"
	"path"

	"k8s.io/klog/v2"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Options say where discovery looks.
type Options struct {
	// NVML is the NVML library; NewNVML returns the real one. Required.
	NVML Library
	// SysfsRoot is where sysfs is mounted; DefaultSysfsRoot when empty.
	SysfsRoot string
	// HCAs selects the RDMA devices that become the topology's NICs, as
	// path.Match patterns on the device name ("mlx5_*"), in the spirit of
	// NCCL_IB_HCA. Empty selects every device with an active port; name
	// the compute NICs explicitly to leave out storage and management ones.
	HCAs []string
	// PodResourcesSocket is the kubelet's pod-resources socket
	// (DefaultPodResourcesSocket on a node). Empty skips allocations.
	PodResourcesSocket string
	// ResourceName is the GPU resource whose allocations are listed;
	// DefaultGPUResourceName when empty.
	ResourceName string
}

func (o Options) withDefaults() Options {
	if o.SysfsRoot == "" {
		o.SysfsRoot = DefaultSysfsRoot
	}
	if o.ResourceName == "" {
		o.ResourceName = lockstep.GPUResource
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.NVML == nil {
		errs = append(errs, errors.New("options: NVML library is nil"))
	}
	for _, p := range o.HCAs {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("options: HCA pattern %q: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Discover reports the node's GPUs, their links, its NICs and its NVLink
// domain, the health of each GPU, and, when opts.PodResourcesSocket is set,
// the GPUs the kubelet has handed out.
//
// It fails only when there is nothing to report, which is NVML's doing
// (SourceNVML) but for a bug in discovery itself: NVML is missing
// (ErrNVMLNotFound) or fails to start or to count GPUs, or lists none
// (ErrNoGPUs). A GPU that fails its queries is reported in GPUHealth, and
// everything discovery worked around is in Warnings, which are also logged
// at V(2).
func Discover(ctx context.Context, opts Options) (report *Report, err error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	lib := opts.NVML
	if err := lib.Init(); err != nil {
		if errors.Is(err, NVMLErrorLibraryNotFound) {
			return nil, fmt.Errorf("%w (nvmlInit: %w)", ErrNVMLNotFound, err)
		}
		return nil, fmt.Errorf("nvmlInit: %w", err)
	}
	var w warnings
	defer func() {
		if err := lib.Shutdown(); err != nil && report != nil {
			w.add("nvmlShutdown: %v", err)
			report.Warnings = w
		}
	}()

	count, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %w", err)
	}
	if count == 0 {
		return nil, ErrNoGPUs
	}
	sys := sysfs{root: opts.SysfsRoot}
	gpus := make([]*gpuFacts, count)
	for i := range gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		gpus[i] = queryGPU(lib, i, sys, &w)
		logger.V(5).Info("Queried GPU", "index", i, "gpu", gpus[i].gpu, "health", gpus[i].health.State,
			"nvlinksToSwitch", gpus[i].nvlink.toSwitch, "pcie", gpus[i].pcie)
	}

	report = &Report{GPUHealth: make([]GPUHealth, count)}
	report.Topology.GPUs = make([]topology.GPU, count)
	locations := make([]gpuLocation, count)
	for i, g := range gpus {
		report.Topology.GPUs[i] = g.gpu
		report.GPUHealth[i] = g.health
		locations[i] = gpuLocation{pci: g.pci, queried: g.queried}
	}
	report.Topology.Links = buildLinks(gpus, &w)
	report.Topology.NVLinkDomain = nvlinkDomain(gpus, &w)

	hcas, err := sys.readHCAs(&w)
	if err != nil {
		w.add("reading RDMA devices from %s: %v; the node has no NICs in the report", opts.SysfsRoot, err)
		report.Unavailable = append(report.Unavailable, SourceSysfs)
	}
	for _, h := range hcas {
		report.HCAs = append(report.HCAs, h.HCA)
	}
	report.Topology.NICs = buildNICs(hcas, locations, opts.HCAs)

	if opts.PodResourcesSocket != "" {
		if answer, err := ListGPUAllocations(ctx, opts.PodResourcesSocket, opts.ResourceName, lockstep.DRAGPUDriver); err != nil {
			w.add("GPU allocations unknown: %v", err)
			report.Unavailable = append(report.Unavailable, SourcePodResources)
		} else {
			var unresolved []string
			report.Allocations, unresolved = ResolveGPUs(answer.Allocations, report.Topology.GPUs)
			report.DynamicResources = answer.DynamicResources
			if len(unresolved) > 0 {
				w.add("allocated %s devices that are no GPU of this node: %v", opts.ResourceName, unresolved)
			}
		}
	}

	if err := report.Topology.Validate(); err != nil {
		// Discovery built an inconsistent model: a bug here, not a
		// property of the machine.
		return nil, fmt.Errorf("discovered topology is invalid: %w", err)
	}
	report.Warnings = w
	for _, msg := range w {
		logger.V(2).Info("Discovery worked around a problem", "warning", msg)
	}
	return report, nil
}

// warnings collects what discovery worked around.
type warnings []string

func (w *warnings) add(format string, args ...any) {
	*w = append(*w, fmt.Sprintf(format, args...))
}
