package topology

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MaxNICs is the largest number of NICs a node may have; NIC sets are 64-bit
// masks like GPU sets.
const MaxNICs = 64

// NodeTopology is the hardware of one GPU node as the topology agent sees it
// through NVML and sysfs. It is plain data: build it, call Validate, then hand
// it to the selection and cost functions, which never modify it.
type NodeTopology struct {
	// GPUs are indexed by their NVML index: GPUs[i].Index == i.
	GPUs []GPU
	// Links is the symmetric GPU-by-GPU link matrix. Links[i][j] connects
	// GPU i and GPU j; the diagonal is the zero Link.
	Links [][]Link
	// NICs are the node's RDMA NICs used for GPU traffic between nodes.
	NICs []NIC
	// NVLinkDomain is set when the node's GPUs are part of a multi-node NVLink
	// domain (GB200 NVL72); nil otherwise.
	NVLinkDomain *NVLinkDomain
}

// GPU is one GPU of a node.
type GPU struct {
	Index int
	// UUID is the NVML UUID ("GPU-…"); optional in models and fixtures.
	UUID    string
	Product string
	// MemoryMiB is the framebuffer size.
	MemoryMiB int
	// PCIBusID is the NVML bus id, e.g. "00000000:18:00.0".
	PCIBusID string
	// NUMANode is the CPU NUMA node closest to the GPU, or -1 when unknown.
	NUMANode int
}

// NIC is one network adapter of a node.
type NIC struct {
	// Name is the RDMA device name, e.g. "mlx5_0".
	Name string
	// RateGbps is the port rate in Gb/s (400 for NDR ConnectX-7).
	RateGbps int
	// NUMANode is the NUMA node of the NIC's PCIe root, or -1 when unknown.
	NUMANode int
	// NearestGPUs are the GPUs that use this NIC for traffic leaving the
	// node, the way NCCL pairs GPUs and NICs: usually the GPUs behind the same
	// PCIe switch.
	NearestGPUs []int
	// GPUPaths, when set, is the path class from this NIC to each GPU, as the
	// NIC columns of `nvidia-smi topo -m` print it. When nil it is derived:
	// PIX to the nearest GPUs, NODE to other GPUs of the NIC's NUMA node, SYS
	// to the rest.
	GPUPaths []LinkClass
}

// GBps returns the NIC rate in GB/s per direction.
func (n NIC) GBps() float64 { return float64(n.RateGbps) / 8 }

// PathTo returns the path class between the NIC and GPU gpu of node.
func (n NIC) PathTo(node *NodeTopology, gpu int) LinkClass {
	if n.GPUPaths != nil {
		return n.GPUPaths[gpu]
	}
	for _, g := range n.NearestGPUs {
		if g == gpu {
			return LinkSameSwitch
		}
	}
	if n.NUMANode >= 0 && node.GPUs[gpu].NUMANode == n.NUMANode {
		return LinkSameNUMA
	}
	return LinkCrossNUMA
}

// NVLinkDomain identifies the multi-node NVLink domain a node belongs to, as
// NVML reports it in the GPU fabric info (GB200 NVL72 and later).
type NVLinkDomain struct {
	// ClusterUUID is the NVLink fabric cluster UUID shared by the rack.
	ClusterUUID string
	// CliqueID partitions a cluster; GPUs talk over NVLink only within one
	// (cluster, clique).
	CliqueID uint32
	// GBps is the per-direction NVLink bandwidth of each GPU into the fabric,
	// which is also what a GPU gets to a GPU of another node of the domain.
	GBps float64
}

// Label returns the value GPU feature discovery writes to the
// nvidia.com/gpu.clique node label: "<cluster UUID>.<clique id>".
func (d NVLinkDomain) Label() string {
	return d.ClusterUUID + "." + strconv.FormatUint(uint64(d.CliqueID), 10)
}

// sameNVLinkDomain reports whether a and b can reach each other over NVLink.
func sameNVLinkDomain(a, b *NVLinkDomain) bool {
	return a != nil && b != nil && a.ClusterUUID == b.ClusterUUID && a.CliqueID == b.CliqueID
}

// NumGPUs returns the number of GPUs of the node.
func (n *NodeTopology) NumGPUs() int { return len(n.GPUs) }

// AllGPUs returns the set of all GPUs of the node.
func (n *NodeTopology) AllGPUs() GPUSet { return AllGPUs(len(n.GPUs)) }

// Link returns the link between GPUs i and j.
func (n *NodeTopology) Link(i, j int) Link { return n.Links[i][j] }

// Validate checks that the topology is internally consistent: GPU indices are
// dense, the link matrix is square, symmetric and fully classified with
// positive bandwidths, and NICs refer to GPUs that exist. It reports every
// problem found, joined, so a bad agent report can be fixed in one pass.
func (n *NodeTopology) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	count := len(n.GPUs)
	switch {
	case count == 0:
		add("no GPUs")
	case count > MaxGPUs:
		add("%d GPUs: at most %d are supported", count, MaxGPUs)
	}
	uuids := make(map[string]int, count)
	for i, g := range n.GPUs {
		if g.Index != i {
			add("gpus[%d].index = %d: GPUs must be listed in index order 0..%d", i, g.Index, count-1)
		}
		if g.NUMANode < -1 {
			add("gpus[%d].numaNode = %d: want -1 (unknown) or a node id", i, g.NUMANode)
		}
		if g.UUID != "" {
			if prev, dup := uuids[g.UUID]; dup {
				add("gpus[%d].uuid %q duplicates gpus[%d]", i, g.UUID, prev)
			}
			uuids[g.UUID] = i
		}
	}

	errs = append(errs, validateLinks(n.Links, count)...)
	errs = append(errs, validateNICs(n.NICs, count)...)

	if d := n.NVLinkDomain; d != nil {
		if d.ClusterUUID == "" {
			add("nvlinkDomain.clusterUUID is empty")
		}
		if !(d.GBps > 0) || math.IsInf(d.GBps, 0) {
			add("nvlinkDomain.gbps = %v: want a positive bandwidth", d.GBps)
		}
	}
	return errors.Join(errs...)
}

func validateLinks(links [][]Link, count int) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(links) != count {
		add("links has %d rows for %d GPUs", len(links), count)
		return errs
	}
	for i, row := range links {
		if len(row) != count {
			add("links[%d] has %d columns for %d GPUs", i, len(row), count)
			return errs
		}
	}
	for i := range count {
		if links[i][i] != (Link{}) {
			add("links[%d][%d] = %v: the diagonal must be empty", i, i, links[i][i])
		}
		for j := i + 1; j < count; j++ {
			l := links[i][j]
			if l != links[j][i] {
				add("links[%d][%d] = %v but links[%d][%d] = %v: the matrix must be symmetric", i, j, l, j, i, links[j][i])
				continue
			}
			switch {
			case l.Class.IsNVLink():
				if l.NVLinks < 1 {
					add("links[%d][%d] is %v with %d links: want at least one", i, j, l.Class, l.NVLinks)
				}
			case l.Class.IsPCIe():
				if l.NVLinks != 0 {
					add("links[%d][%d] is %v with %d NVLinks: only NVLink classes have links", i, j, l.Class, l.NVLinks)
				}
			default:
				add("links[%d][%d] has unknown class %v", i, j, l.Class)
			}
			if !(l.GBps > 0) || math.IsInf(l.GBps, 0) {
				add("links[%d][%d].gbps = %v: want a positive bandwidth", i, j, l.GBps)
			}
		}
	}
	return errs
}

func validateNICs(nics []NIC, count int) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(nics) > MaxNICs {
		add("%d NICs: at most %d are supported", len(nics), MaxNICs)
	}
	names := make(map[string]int, len(nics))
	for i, nic := range nics {
		if nic.Name == "" {
			add("nics[%d].name is empty", i)
		} else if prev, dup := names[nic.Name]; dup {
			add("nics[%d].name %q duplicates nics[%d]", i, nic.Name, prev)
		} else {
			names[nic.Name] = i
		}
		if nic.RateGbps <= 0 {
			add("nics[%d].rateGbps = %d: want a positive rate", i, nic.RateGbps)
		}
		if nic.NUMANode < -1 {
			add("nics[%d].numaNode = %d: want -1 (unknown) or a node id", i, nic.NUMANode)
		}
		var seen GPUSet
		for _, g := range nic.NearestGPUs {
			if g < 0 || g >= count {
				add("nics[%d].nearestGPUs has GPU %d: want 0..%d", i, g, count-1)
				continue
			}
			if seen.Has(g) {
				add("nics[%d].nearestGPUs lists GPU %d twice", i, g)
			}
			seen |= NewGPUSet(g)
		}
		if nic.GPUPaths == nil {
			continue
		}
		if len(nic.GPUPaths) != count {
			add("nics[%d].gpuPaths has %d entries for %d GPUs", i, len(nic.GPUPaths), count)
			continue
		}
		best := LinkUnknown
		for g, c := range nic.GPUPaths {
			if !c.IsPCIe() {
				add("nics[%d].gpuPaths[%d] = %v: a NIC reaches GPUs over PCIe classes only", i, g, c)
			}
			best = max(best, c)
		}
		for _, g := range seen.Indices() {
			if nic.GPUPaths[g] != best {
				add("nics[%d]: nearest GPU %d is %v away but GPU paths reach %v", i, g, nic.GPUPaths[g], best)
			}
		}
	}
	return errs
}
