package discovery

import (
	"math"
	"path"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// gpuLocation is a GPU as NIC placement sees it.
type gpuLocation struct {
	// pci is the GPU's place in the PCIe tree; its path is empty when sysfs
	// did not show it.
	pci pciDevice
	// queried is false for a GPU discovery could not query: it is put at
	// the far end of every NIC and never named a nearest GPU.
	queried bool
}

// buildNICs turns the HCAs that carry traffic into the topology's NICs: each
// HCA selected by patterns (path.Match globs on the device name, all HCAs
// when empty) that has an active port. A NIC's path to each GPU is the
// PCIe path between them in sysfs, or the NUMA relation when either end is
// not in the PCIe tree; its nearest GPUs are the queried GPUs on the
// closest path, the pairing NCCL would make.
func buildNICs(hcas []rdmaDevice, gpus []gpuLocation, patterns []string) []topology.NIC {
	var nics []topology.NIC
	for _, hca := range hcas {
		rate := hca.ActiveRateGbps()
		if rate <= 0 || !selectedHCA(hca.Name, patterns) {
			continue
		}
		nic := topology.NIC{
			Name:     hca.Name,
			RateGbps: int(math.Round(rate)),
			NUMANode: hca.NUMANode,
			GPUPaths: make([]topology.LinkClass, len(gpus)),
		}
		best := topology.LinkUnknown
		for g, gpu := range gpus {
			class := topology.LinkCrossNUMA
			switch {
			case !gpu.queried:
			case len(hca.pci.path) > 0 && len(gpu.pci.path) > 0:
				class = pciPathClass(hca.pci, gpu.pci)
			default:
				class = numaPathClass(hca.NUMANode, gpu.pci.numaNode)
			}
			nic.GPUPaths[g] = class
			if gpu.queried {
				best = max(best, class)
			}
		}
		for g, gpu := range gpus {
			if gpu.queried && nic.GPUPaths[g] == best {
				nic.NearestGPUs = append(nic.NearestGPUs, g)
			}
		}
		nics = append(nics, nic)
	}
	return nics
}

// selectedHCA reports whether the HCA name matches one of the patterns, or
// whether there are none. Patterns are validated by Options.validate.
func selectedHCA(name string, patterns []string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
