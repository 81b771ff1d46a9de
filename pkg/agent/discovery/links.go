package discovery

import (
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// buildLinks fills the GPU-by-GPU link matrix. For each pair of queried GPUs
// the closest path wins: direct NVLinks, then NVSwitches both reach, then
// the PCIe path NVML reports. Links of GPUs that could not be queried are
// placeholders.
func buildLinks(gpus []*gpuFacts, w *warnings) [][]topology.Link {
	settleUnknownNVLinkEnds(gpus)
	links := make([][]topology.Link, len(gpus))
	for i := range links {
		links[i] = make([]topology.Link, len(gpus))
	}
	for i, a := range gpus {
		for j := i + 1; j < len(gpus); j++ {
			b := gpus[j]
			l := placeholderLink()
			if a.queried && b.queried {
				l = classifyPair(a, b, w)
			}
			links[i][j], links[j][i] = l, l
		}
	}
	return links
}

// settleUnknownNVLinkEnds decides the links whose far end NVML would not
// type (older drivers lack nvmlDeviceGetNvLinkRemoteDeviceType): a link to
// one of the node's GPUs is a GPU link, and any other far end is taken for
// an NVSwitch, the only other NVLink peer on x86 and Grace machines.
func settleUnknownNVLinkEnds(gpus []*gpuFacts) {
	isGPU := make(map[string]bool, len(gpus))
	for _, g := range gpus {
		if g.pciAddress != "" {
			isGPU[g.pciAddress] = true
		}
	}
	for _, g := range gpus {
		for addr, n := range g.nvlink.toUnknown {
			if isGPU[addr] {
				g.nvlink.toGPU[addr] += n
			} else {
				g.nvlink.toSwitch += n
			}
		}
		clear(g.nvlink.toUnknown)
	}
}

// classifyPair is the link between two queried GPUs.
func classifyPair(a, b *gpuFacts, w *warnings) topology.Link {
	ia, ib := a.gpu.Index, b.gpu.Index
	if l, ok := directNVLink(a, b, w); ok {
		return l
	}
	if a.nvlink.toSwitch > 0 && b.nvlink.toSwitch > 0 {
		status, err := a.dev.NVLinkP2PStatus(b.dev)
		switch {
		case err == nil && status == P2PStatusOK:
			return nvswitchLink(a, b)
		case err != nil && isNotSupported(err):
			// Without an answer, trust the links: both GPUs reach the
			// same switches on every machine built this way.
			w.add("GPUs %d and %d: NVLink peer-to-peer status unknown (%v); assuming they reach each other through NVSwitch", ia, ib, err)
			return nvswitchLink(a, b)
		case err != nil:
			w.add("GPUs %d and %d: %v; using the PCIe path", ia, ib, &QueryError{GPU: ia, Call: "nvmlDeviceGetP2PStatus", Err: err})
		default:
			w.add("GPUs %d and %d are both attached to NVSwitches but NVLink peer-to-peer is %v (is nvidia-fabricmanager running?); using the PCIe path", ia, ib, status)
		}
	}
	class := topology.LinkUnknown
	if level, err := a.dev.TopologyCommonAncestor(b.dev); err != nil {
		class = numaPathClass(a.gpu.NUMANode, b.gpu.NUMANode)
		w.add("%v; assuming %v from the NUMA nodes", &QueryError{GPU: ia, Call: "nvmlDeviceGetTopologyCommonAncestor", Err: err}, class)
	} else if class = pcieClass(level); class == topology.LinkUnknown {
		class = numaPathClass(a.gpu.NUMANode, b.gpu.NUMANode)
		w.add("GPUs %d and %d: unknown topology level %d; assuming %v from the NUMA nodes", ia, ib, level, class)
	}
	return topology.Link{Class: class, GBps: pcieGBps(class, a.pcie, b.pcie)}
}

// directNVLink is the bonded NVLink between a and b, if any. Both GPUs
// count the links; when they disagree (a link down at one end) the lower
// count is what traffic can use.
func directNVLink(a, b *gpuFacts, w *warnings) (topology.Link, bool) {
	ab, ba := a.nvlink.toGPU[b.pciAddress], b.nvlink.toGPU[a.pciAddress]
	if ab == 0 && ba == 0 {
		return topology.Link{}, false
	}
	n := min(ab, ba)
	if ab != ba {
		w.add("GPU %d counts %d NVLinks to GPU %d, which counts %d back; using %d", a.gpu.Index, ab, b.gpu.Index, ba, n)
	}
	if n == 0 {
		return topology.Link{}, false
	}
	gbps := min(a.nvlink.linkGBps, b.nvlink.linkGBps)
	return topology.Link{Class: topology.LinkNVLink, NVLinks: n, GBps: float64(n) * gbps}, true
}

// nvswitchLink is the link between two GPUs that reach each other through
// NVSwitches: the pair gets what the weaker GPU has into the switches.
func nvswitchLink(a, b *gpuFacts) topology.Link {
	return topology.Link{
		Class:   topology.LinkNVSwitch,
		NVLinks: min(a.nvlink.toSwitch, b.nvlink.toSwitch),
		GBps:    min(a.nvlink.switchGBps(), b.nvlink.switchGBps()),
	}
}

// switchGBps is the GPU's bandwidth into the NVSwitches.
func (e nvlinkEnds) switchGBps() float64 { return float64(e.toSwitch) * e.linkGBps }

// pcieClass maps NVML's common-ancestor level to the path class
// `nvidia-smi topo -m` prints for it.
func pcieClass(level TopologyLevel) topology.LinkClass {
	switch level {
	case TopologyInternal, TopologySingle:
		return topology.LinkSameSwitch
	case TopologyMultiple:
		return topology.LinkMultiSwitch
	case TopologyHostBridge:
		return topology.LinkHostBridge
	case TopologyNode:
		return topology.LinkSameNUMA
	case TopologySystem:
		return topology.LinkCrossNUMA
	default:
		return topology.LinkUnknown
	}
}
