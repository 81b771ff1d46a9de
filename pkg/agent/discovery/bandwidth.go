package discovery

import "github.com/lockstep-dev/lockstep/pkg/topology"

// Bandwidths are per direction in GB/s, the unit of topology.Link.
//
// NVLink: NVIDIA quotes bidirectional totals per GPU, which divided by the
// links per GPU and halved give the per-link, per-direction rate:
//   - NVLink 1.0, P100: 160 GB/s over 4 links: 20.
//   - NVLink 2.0, V100: 300 GB/s over 6 links: 25.
//   - NVLink 3.0, A100: 600 GB/s over 12 links: 25.
//   - NVLink 4.0, H100: 900 GB/s over 18 links: 25.
//   - NVLink 5.0, Blackwell: 1.8 TB/s over 18 links ("18 NVLink 100 GB/s
//     connections", NVIDIA's NVLink and NVSwitch product page): 50.
//
// hwloc's NVML backend uses the same 20/25 figures per direction. They are
// signalling rates; nvidia-smi nvlink -s prints the raw line rate, slightly
// higher (26.562 GB/s on H100, 53.125 on GB200).
const (
	nvlink1LinkGBps = 20
	nvlink2LinkGBps = 25 // NVLink 2.0 through 4.0
	nvlink5LinkGBps = 50
)

// nvlinkLinkGBps returns the per-direction bandwidth of one NVLink of the
// given version on a GPU of the given architecture, and false when the
// version is not one this package knows.
func nvlinkLinkGBps(v NVLinkVersion, arch Architecture) (float64, bool) {
	switch {
	case v == NVLinkVersion1_0:
		return nvlink1LinkGBps, true
	case v >= NVLinkVersion2_0 && v <= NVLinkVersion4_0:
		return nvlink2LinkGBps, true
	case v == NVLinkVersion5_0:
		// NVLink 5 exists only from Blackwell on. Some drivers have been
		// reported to answer 5.0 on H100; trusting that would double
		// every HGX H100 link.
		if arch != ArchUnknown && arch < ArchBlackwell {
			return nvlink2LinkGBps, true
		}
		return nvlink5LinkGBps, true
	default:
		return 0, false
	}
}

// The PCIe link assumed for a GPU whose link NVML does not report.
const (
	defaultPCIeGeneration = 4
	defaultPCIeWidth      = 16
)

// pcieX16P2PGBps is what GPU peer-to-peer copies achieve over a PCIe x16 path
// of class c, by PCIe generation, rather than the raw link rate: that is
// what a collective sees. The Gen3 SYS and all Gen4 figures are the ones the
// built-in profiles use (pkg/topology/profile_nodes.go) so that discovery of
// those machines reproduces them; the round-trip tests fail when the two
// drift apart. Gen3 under the CPU is Gen4 halved, but SYS stays at 10
// because the profile measures it there; Gen5 is Gen4 doubled.
func pcieX16P2PGBps(gen int, c topology.LinkClass) float64 {
	var sameSwitch, underCPU, crossNUMA float64
	switch gen {
	case 3:
		sameSwitch, underCPU, crossNUMA = 12.5, 10, 10
	case 4:
		sameSwitch, underCPU, crossNUMA = 25, 20, 14
	default: // 5
		sameSwitch, underCPU, crossNUMA = 50, 40, 28
	}
	switch c {
	case topology.LinkSameSwitch, topology.LinkMultiSwitch:
		return sameSwitch
	case topology.LinkHostBridge, topology.LinkSameNUMA:
		return underCPU
	default:
		return crossNUMA
	}
}

// pcieGBps returns the peer-to-peer bandwidth between two GPUs whose path
// has class c, given each GPU's link: the slower generation and the
// narrower width of the two bound the transfer. Generations before 3 are
// scaled down from Gen3 and later ones are held at Gen5, the newest figure
// we have.
func pcieGBps(c topology.LinkClass, a, b PCIeLink) float64 {
	gen := min(a.Generation, b.Generation)
	scale := float64(min(a.Width, b.Width)) / 16
	switch {
	case gen < 3:
		scale /= float64(int(1) << (3 - gen))
		gen = 3
	case gen > 5:
		gen = 5
	}
	return pcieX16P2PGBps(gen, c) * scale
}

// lostGPULinkGBps is the bandwidth given to links of a GPU discovery could
// not query. Validate needs a positive bandwidth; the smallest possible one
// ranks any GPU set holding that GPU last. Callers must still exclude such
// GPUs, as Report.GPUHealth says.
const lostGPULinkGBps = 0.001
