package discovery

import (
	"errors"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// maxNVLinks is NVML_NVLINK_MAX_LINKS, the most links NVML numbers per GPU.
const maxNVLinks = 18

// gpuFacts is everything discovery learns about one GPU before relating it
// to the others.
type gpuFacts struct {
	dev    Device
	gpu    topology.GPU
	health GPUHealth
	// queried is true when every query discovery cannot do without
	// answered; links and NICs are only worked out for such GPUs.
	queried bool
	arch    Architecture
	pcie    PCIeLink
	// pciAddress is the GPU's sysfs PCI address ("0000:18:00.0").
	pciAddress string
	pci        pciDevice
	nvlink     nvlinkEnds
	fabric     FabricInfo
	// fabricErr is why fabric is unknown; nil when it was read.
	fabricErr error
}

// nvlinkEnds counts where a GPU's active NVLinks go.
type nvlinkEnds struct {
	// toGPU counts links to a GPU, by that GPU's sysfs PCI address.
	toGPU map[string]int
	// toSwitch counts links into NVSwitches.
	toSwitch int
	// toUnknown counts links whose far end NVML would not type, by the far
	// end's PCI address; they are settled once all GPUs are known.
	toUnknown map[string]int
	// linkGBps is the per-direction bandwidth of one link, the slowest
	// active link's; zero when no link is active.
	linkGBps float64
}

// total is the number of active links.
func (e nvlinkEnds) total() int {
	n := e.toSwitch
	for _, c := range e.toGPU {
		n += c
	}
	for _, c := range e.toUnknown {
		n += c
	}
	return n
}

// queryGPU learns what NVML and sysfs say about GPU index. It never fails:
// a GPU that stops answering is returned with its health saying why, and
// with whatever was learned before.
func queryGPU(lib Library, index int, sys sysfs, w *warnings) *gpuFacts {
	f := &gpuFacts{
		gpu:    topology.GPU{Index: index, NUMANode: -1},
		health: GPUHealth{Index: index, State: GPUHealthy},
		arch:   ArchUnknown,
		nvlink: nvlinkEnds{toGPU: map[string]int{}, toUnknown: map[string]int{}},
	}
	err := f.query(lib, sys, w)
	f.health.UUID = f.gpu.UUID
	switch {
	case err == nil:
		f.queried = true
	case errors.Is(err, NVMLErrorGPUIsLost):
		f.health.State, f.health.Reason = GPULost, err.Error()
	default:
		f.health.State, f.health.Reason = GPUUnknown, err.Error()
	}
	return f
}

// query fills f, returning a *QueryError when a query the GPU cannot be
// modelled without fails or the GPU is lost.
func (f *gpuFacts) query(lib Library, sys sysfs, w *warnings) error {
	i := f.gpu.Index
	fail := func(call string, err error) error { return &QueryError{GPU: i, Call: call, Err: err} }

	dev, err := lib.DeviceByIndex(i)
	if err != nil {
		return fail("nvmlDeviceGetHandleByIndex", err)
	}
	f.dev = dev
	// The bus id comes first: it is what an operator needs to find a GPU
	// that fails the queries after it.
	busID, err := dev.PCIBusID()
	if err != nil {
		return fail("nvmlDeviceGetPciInfo", err)
	}
	if f.pciAddress, err = pciAddress(busID); err != nil {
		return fail("nvmlDeviceGetPciInfo", err)
	}
	f.gpu.PCIBusID = busID
	uuid, err := dev.UUID()
	if err != nil {
		return fail("nvmlDeviceGetUUID", err)
	}
	f.gpu.UUID = uuid
	name, err := dev.Name()
	if err != nil {
		return fail("nvmlDeviceGetName", err)
	}
	total, err := dev.MemoryTotalBytes()
	if err != nil {
		return fail("nvmlDeviceGetMemoryInfo", err)
	}
	f.gpu.Product = productLabel(name)
	f.gpu.MemoryMiB = int(total >> 20)

	// The rest have fallbacks; only a lost GPU stops discovery of it.
	opt := optionalQuery{gpu: i, w: w}
	if arch, err := dev.Architecture(); opt.ok("nvmlDeviceGetArchitecture", err) {
		f.arch = arch
	}
	if err := f.queryNUMANode(sys, &opt); err != nil {
		return err
	}
	if cur, pending, err := dev.MIGMode(); opt.ok("nvmlDeviceGetMigMode", err) {
		f.noteMIGMode(cur, pending, w)
	}
	f.pcie = PCIeLink{Generation: defaultPCIeGeneration, Width: defaultPCIeWidth}
	if link, err := dev.MaxPCIeLink(); opt.ok("nvmlDeviceGetMaxPcieLinkGeneration", err) && link.Generation > 0 && link.Width > 0 {
		f.pcie = link
	} else if opt.lost == nil {
		w.add("GPU %d: PCIe link unknown; assuming Gen%d x%d", i, defaultPCIeGeneration, defaultPCIeWidth)
	}
	if opt.lost != nil {
		return opt.lost
	}
	if err := f.queryNVLinks(&opt); err != nil {
		return err
	}
	f.fabric, f.fabricErr = dev.FabricInfo()
	if errors.Is(f.fabricErr, NVMLErrorGPUIsLost) {
		return fail("nvmlDeviceGetGpuFabricInfoV", f.fabricErr)
	}
	return opt.lost
}

// queryNUMANode finds the CPU NUMA node nearest the GPU: the kernel's
// numa_node of its PCI device, or else the lowest node of NVML's memory
// affinity. nvmlDeviceGetNumaNodeId is not used: it answers only where GPU
// memory is itself a NUMA node (Grace Hopper, GB200), and there it is that
// node, not the CPU's.
func (f *gpuFacts) queryNUMANode(sys sysfs, opt *optionalQuery) error {
	pci, sysErr := sys.pciDeviceByAddress(f.pciAddress)
	if sysErr == nil {
		f.pci = pci
		f.gpu.NUMANode = pci.numaNode
	}
	if f.gpu.NUMANode >= 0 {
		return nil
	}
	if nodes, err := f.dev.MemoryAffinity(); opt.ok("nvmlDeviceGetMemoryAffinity", err) && len(nodes) > 0 {
		f.gpu.NUMANode = nodes[0]
		return nil
	}
	if opt.lost != nil {
		return opt.lost
	}
	if sysErr != nil {
		opt.w.add("GPU %d: NUMA node unknown: sysfs: %v", f.gpu.Index, sysErr)
	}
	return nil
}

// noteMIGMode records a GPU partitioned with MIG, and warns about a mode
// change waiting for a GPU reset, which will change what the GPU offers.
func (f *gpuFacts) noteMIGMode(current, pending bool, w *warnings) {
	if current {
		f.health.State = GPUMIGEnabled
		f.health.Reason = "MIG mode is enabled: the GPU is offered as MIG instances, not as a whole GPU"
	}
	switch {
	case pending && !current:
		w.add("GPU %d: MIG mode becomes enabled at the next GPU reset", f.gpu.Index)
	case current && !pending:
		w.add("GPU %d: MIG mode becomes disabled at the next GPU reset", f.gpu.Index)
	}
}

// queryNVLinks counts the GPU's active NVLinks by far end. A GPU without
// NVLink answers not-supported on its first link; the first link index past
// the GPU's last answers invalid-argument.
func (f *gpuFacts) queryNVLinks(opt *optionalQuery) error {
	i := f.gpu.Index
	for link := range maxNVLinks {
		active, err := f.dev.NVLinkState(link)
		if errors.Is(err, NVMLErrorInvalidArgument) || (err != nil && isNotSupported(err)) {
			break
		}
		if !opt.ok("nvmlDeviceGetNvLinkState", err) || !active {
			if opt.lost != nil {
				return opt.lost
			}
			continue
		}
		if err := f.queryNVLink(link, opt); err != nil {
			return err
		}
	}
	if f.nvlink.total() > 0 && f.nvlink.linkGBps == 0 {
		f.nvlink.linkGBps = nvlink2LinkGBps
		opt.w.add("GPU %d: NVLink version unknown; assuming %d GB/s per link", i, nvlink2LinkGBps)
	}
	return nil
}

// queryNVLink records where active link goes and how fast it is.
func (f *gpuFacts) queryNVLink(link int, opt *optionalQuery) error {
	i := f.gpu.Index
	if v, err := f.dev.NVLinkVersion(link); opt.ok("nvmlDeviceGetNvLinkVersion", err) {
		if gbps, known := nvlinkLinkGBps(v, f.arch); known {
			if f.nvlink.linkGBps == 0 || gbps < f.nvlink.linkGBps {
				f.nvlink.linkGBps = gbps
			}
		} else {
			opt.w.add("GPU %d: NVLink %d: unknown NVLink version %d", i, link, v)
		}
	}
	remote := NVLinkDeviceUnknown
	if t, err := f.dev.NVLinkRemoteDeviceType(link); opt.ok("nvmlDeviceGetNvLinkRemoteDeviceType", err) {
		remote = t
	}
	if opt.lost != nil {
		return opt.lost
	}
	switch remote {
	case NVLinkDeviceSwitch:
		f.nvlink.toSwitch++
		return nil
	case NVLinkDeviceIBMNPU:
		// A link to a POWER CPU carries no GPU-to-GPU traffic.
		return nil
	}
	busID, err := f.dev.NVLinkRemotePCIBusID(link)
	if !opt.ok("nvmlDeviceGetNvLinkRemotePciInfo", err) {
		return opt.lost
	}
	addr, err := pciAddress(busID)
	if err != nil {
		opt.w.add("GPU %d: NVLink %d: %v", i, link, err)
		return nil
	}
	if remote == NVLinkDeviceGPU {
		f.nvlink.toGPU[addr]++
	} else {
		f.nvlink.toUnknown[addr]++
	}
	return nil
}

// optionalQuery sorts the outcomes of NVML calls discovery has a fallback
// for: a lost GPU stops its discovery, an unsupported feature is silently
// done without, and any other failure is done without and reported.
type optionalQuery struct {
	gpu int
	w   *warnings
	// lost is set to the first call that found the GPU lost.
	lost error
}

// ok reports whether call answered; it records why not otherwise.
func (q *optionalQuery) ok(call string, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, NVMLErrorGPUIsLost):
		if q.lost == nil {
			q.lost = &QueryError{GPU: q.gpu, Call: call, Err: err}
		}
	case isNotSupported(err):
	default:
		q.w.add("%v", &QueryError{GPU: q.gpu, Call: call, Err: err})
	}
	return false
}

// productLabel turns an NVML product name into the form GPU feature
// discovery labels nodes with and the profiles use ("NVIDIA H100 80GB HBM3"
// becomes "NVIDIA-H100-80GB-HBM3").
func productLabel(name string) string {
	return strings.Join(strings.Fields(name), "-")
}

// placeholderLink is the link to or from a GPU that could not be queried.
func placeholderLink() topology.Link {
	return topology.Link{Class: topology.LinkCrossNUMA, GBps: lostGPULinkGBps}
}
