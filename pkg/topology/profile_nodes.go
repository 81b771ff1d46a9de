package topology

import "fmt"

// Per-direction bandwidths, in GB/s, the profiles are built from. NVLink
// figures are the signalling rate per link (what NVIDIA quotes, halved for
// one direction); PCIe figures are what peer-to-peer copies achieve in
// practice, not the raw rate, because that is what a collective sees.
const (
	// NVLink2 (V100), NVLink3 (A100) and NVLink4 (H100) all run 25 GB/s per
	// link per direction; the generations differ in links per GPU (6, 12, 18).
	nvlink2LinkGBps = 25
	nvlink3LinkGBps = 25
	nvlink4LinkGBps = 25
	// NVLink5 (B200) doubles the rate: 18 links x 50 = 900 GB/s per direction.
	nvlink5LinkGBps = 50

	// PCIe Gen4 x16 is 31.5 GB/s raw per direction; P2P under one switch
	// reaches about 25, through a CPU root complex about 20, and across the
	// socket interconnect (xGMI/UPI) about 14.
	pcieGen4SwitchGBps      = 25
	pcieGen4SameNUMAGBps    = 20
	pcieGen4CrossSocketGBps = 14
	// PCIe Gen3 x16 across QPI (DGX-1): about 10 GB/s, since Broadwell routes
	// P2P between sockets through host memory.
	pcieGen3CrossSocketGBps = 10
)

// Node returns a fresh topology of one node of the profile. For profiles in a
// multi-node NVLink domain the domain identity is a placeholder (zero cluster
// UUID, clique 0): callers modelling several racks set their own.
func (p Profile) Node() (*NodeTopology, error) {
	switch p.Name {
	case "hgx-h100":
		return hgxH100Node(p), nil
	case "dgx1-v100":
		return dgx1V100Node(p), nil
	case "l40s-pcie":
		return l40sPCIeNode(p), nil
	case "a100-pcie-nvlink":
		return a100PCIeNVLinkNode(p), nil
	case "gb200-nvl72":
		return gb200NVL72Node(p), nil
	default:
		return nil, fmt.Errorf("profile %q has no built-in node topology", p.Name)
	}
}

// hgxH100Node is an HGX/DGX H100 baseboard.
//
//   - 8x H100 SXM5 80GB. Each GPU has 18 NVLink4 links spread over the four
//     NVSwitch chips of the baseboard, so every pair is NV18 at 450 GB/s per
//     direction (900 GB/s bidirectional), regardless of socket.
//   - 8x ConnectX-7 400 Gb/s (NDR) compute NICs, one per GPU behind the same
//     PCIe Gen5 switch (PIX); NODE to the other NICs of the socket, SYS to the
//     other socket's. The storage and in-band NICs are left out: they carry
//     no collective traffic.
//   - Two sockets: GPUs 0-3 and their NICs on NUMA 0, GPUs 4-7 on NUMA 1.
//   - PCI bus ids are the DGX H100's.
func hgxH100Node(p Profile) *NodeTopology {
	node := newProfileNode(p,
		[]string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"},
		[]int{0, 0, 0, 0, 1, 1, 1, 1})
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			node.connect(i, j, Link{Class: LinkNVSwitch, NVLinks: 18, GBps: 18 * nvlink4LinkGBps})
		}
	}
	for g := range 8 {
		node.NICs = append(node.NICs, NIC{
			Name:        fmt.Sprintf("mlx5_%d", g),
			RateGbps:    400,
			NUMANode:    g / 4,
			NearestGPUs: []int{g},
			GPUPaths:    nicPaths(node, g/4, []int{g}, LinkSameSwitch, LinkSameNUMA),
		})
	}
	return node
}

// dgx1V100Node is a DGX-1 with V100 SXM2 (DGX-1V).
//
//   - 8x V100 with 6 NVLink2 links each (25 GB/s per link per direction) in a
//     hybrid cube-mesh: two quads {0,1,2,3} and {4,5,6,7}, each GPU linked
//     to the three others of its quad and to its counterpart i±4 in the
//     other quad. Some pairs have two links (NV2, 50 GB/s), the others one
//     (NV1, 25 GB/s); see the matrix below. The other twelve cross-quad
//     pairs go over PCIe Gen3 and QPI: SYS.
//   - Each PLX PCIe switch holds two GPUs and one EDR InfiniBand NIC
//     (100 Gb/s): NICs are PIX to GPUs {0,1}, {2,3}, {4,5}, {6,7}, PHB to the
//     other pair of their socket (both switches hang off the one host bridge
//     of a Broadwell socket), SYS across.
//   - Two sockets: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1.
//   - PCI bus ids are the DGX-1V's.
func dgx1V100Node(p Profile) *NodeTopology {
	node := newProfileNode(p,
		[]string{"06", "07", "0A", "0B", "85", "86", "89", "8A"},
		[]int{0, 0, 0, 0, 1, 1, 1, 1})
	// nvlinks[i][j] is the number of NVLinks between GPUs i and j, as
	// `nvidia-smi topo -m` prints on a DGX-1V; every row sums to 6.
	nvlinks := [8][8]int{
		{0, 1, 1, 2, 2, 0, 0, 0},
		{1, 0, 2, 1, 0, 2, 0, 0},
		{1, 2, 0, 2, 0, 0, 1, 0},
		{2, 1, 2, 0, 0, 0, 0, 1},
		{2, 0, 0, 0, 0, 1, 1, 2},
		{0, 2, 0, 0, 1, 0, 2, 1},
		{0, 0, 1, 0, 1, 2, 0, 2},
		{0, 0, 0, 1, 2, 1, 2, 0},
	}
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			l := Link{Class: LinkCrossNUMA, GBps: pcieGen3CrossSocketGBps}
			if k := nvlinks[i][j]; k > 0 {
				l = Link{Class: LinkNVLink, NVLinks: k, GBps: float64(k * nvlink2LinkGBps)}
			}
			node.connect(i, j, l)
		}
	}
	for s := range 4 {
		pair := []int{2 * s, 2*s + 1}
		node.NICs = append(node.NICs, NIC{
			Name:        fmt.Sprintf("mlx5_%d", s),
			RateGbps:    100,
			NUMANode:    s / 2,
			NearestGPUs: pair,
			GPUPaths:    nicPaths(node, s/2, pair, LinkSameSwitch, LinkHostBridge),
		})
	}
	return node
}

// l40sPCIeNode is an 8x L40S PCIe server built to NVIDIA's "2-8-5-200"
// enterprise reference configuration (two sockets, eight GPUs, four
// east-west NICs plus one north-south, 200 Gb/s of east-west per GPU).
//
//   - 8x L40S 48GB, no NVLink. Four PCIe Gen4 switches each hold a GPU pair
//     ({0,1}, {2,3}, {4,5}, {6,7}) and one NIC; pairs are PIX (25 GB/s).
//     Switches 0-1 hang off different host bridges of socket 0 and 2-3 off
//     socket 1: NODE within a socket (20 GB/s), SYS across (14 GB/s).
//   - 4x ConnectX-7 400 Gb/s east-west NICs, one per switch: PIX to its pair,
//     NODE to the socket's other pair, SYS across. The north-south
//     BlueField-3 is left out: it carries no collective traffic.
//   - Two sockets: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1.
//   - PCI bus ids are illustrative.
func l40sPCIeNode(p Profile) *NodeTopology {
	node := newProfileNode(p,
		[]string{"1B", "1C", "3D", "3E", "9B", "9C", "BD", "BE"},
		[]int{0, 0, 0, 0, 1, 1, 1, 1})
	connectPCIePairs(node)
	addSwitchNICs(node, 400)
	return node
}

// a100PCIeNVLinkNode is an 8x A100 PCIe 80GB server with NVLink bridges.
//
//   - Three NVLink bridges join each pair (0,1), (2,3), (4,5), (6,7): all 12
//     NVLink3 links of each GPU go to its partner, NV12 at 300 GB/s per
//     direction (the 600 GB/s bidirectional NVIDIA quotes).
//   - Every other pair is PCIe Gen4, laid out as for the L40S server: each
//     bridged pair shares a switch, two switches per socket, so NODE within
//     a socket (20 GB/s) and SYS across (14 GB/s).
//   - 4x ConnectX-6 200 Gb/s (HDR) NICs, one per switch: PIX to its pair,
//     NODE to the socket's other pair, SYS across.
//   - Two sockets: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1.
//   - PCI bus ids are illustrative.
func a100PCIeNVLinkNode(p Profile) *NodeTopology {
	node := newProfileNode(p,
		[]string{"17", "18", "31", "32", "98", "99", "B1", "B2"},
		[]int{0, 0, 0, 0, 1, 1, 1, 1})
	connectPCIePairs(node)
	for i := 0; i < 8; i += 2 {
		node.connect(i, i+1, Link{Class: LinkNVLink, NVLinks: 12, GBps: 12 * nvlink3LinkGBps})
	}
	addSwitchNICs(node, 200)
	return node
}

// gb200NVL72Node is one compute tray of a GB200 NVL72 rack.
//
//   - Two Grace CPUs, each with two B200 GPUs attached over NVLink-C2C: GPUs
//     0-1 on NUMA 0, 2-3 on NUMA 1.
//   - Every GPU has 18 NVLink5 links into the rack's NVLink switch trays, so
//     all GPU pairs, in this tray or any other of the rack's 18, are NV18 at
//     900 GB/s per direction: the tray is one node of a 72-GPU multi-node
//     NVLink domain (Profile.NVLinkDomainNodes = 18).
//   - 4x ConnectX-7 400 Gb/s NICs, one per GPU (NCCL's pairing); they sit on
//     the Graces' PCIe, so nvidia-smi reports every GPU-to-NIC path as SYS.
//     The BlueField-3 front-end DPUs are left out.
//   - PCI bus ids are the GB200's per-GPU PCI domains.
func gb200NVL72Node(p Profile) *NodeTopology {
	node := newProfileNode(p,
		[]string{"0008:01", "0009:01", "0018:01", "0019:01"},
		[]int{0, 0, 1, 1})
	fabric := Link{Class: LinkNVSwitch, NVLinks: 18, GBps: 18 * nvlink5LinkGBps}
	for i := range 4 {
		for j := i + 1; j < 4; j++ {
			node.connect(i, j, fabric)
		}
	}
	for g := range 4 {
		node.NICs = append(node.NICs, NIC{
			Name:        fmt.Sprintf("mlx5_%d", g),
			RateGbps:    400,
			NUMANode:    g / 2,
			NearestGPUs: []int{g},
			GPUPaths:    []LinkClass{LinkCrossNUMA, LinkCrossNUMA, LinkCrossNUMA, LinkCrossNUMA},
		})
	}
	node.NVLinkDomain = &NVLinkDomain{
		ClusterUUID: "00000000-0000-0000-0000-000000000000",
		GBps:        fabric.GBps,
	}
	return node
}

// newProfileNode returns a node of p's GPUs with an empty link matrix. A bus
// id given as "BB" or "DDDD:BB" is expanded to NVML's "DDDDDDDD:BB:00.0".
func newProfileNode(p Profile, buses []string, numa []int) *NodeTopology {
	node := &NodeTopology{GPUs: make([]GPU, p.GPUCount), Links: make([][]Link, p.GPUCount)}
	for i := range node.GPUs {
		bus := buses[i]
		if len(bus) == 2 {
			bus = "0000:" + bus
		}
		node.GPUs[i] = GPU{
			Index:     i,
			Product:   p.GPUProduct,
			MemoryMiB: p.GPUMemoryMiB,
			PCIBusID:  "0000" + bus + ":00.0",
			NUMANode:  numa[i],
		}
		node.Links[i] = make([]Link, p.GPUCount)
	}
	return node
}

// connect sets the link between GPUs i and j in both directions.
func (n *NodeTopology) connect(i, j int, l Link) {
	n.Links[i][j] = l
	n.Links[j][i] = l
}

// connectPCIePairs links 8 GPUs laid out two per PCIe switch, two switches
// per socket: PIX within a switch, NODE within a socket, SYS across.
func connectPCIePairs(node *NodeTopology) {
	for i := range 8 {
		for j := i + 1; j < 8; j++ {
			switch {
			case i/2 == j/2:
				node.connect(i, j, Link{Class: LinkSameSwitch, GBps: pcieGen4SwitchGBps})
			case i/4 == j/4:
				node.connect(i, j, Link{Class: LinkSameNUMA, GBps: pcieGen4SameNUMAGBps})
			default:
				node.connect(i, j, Link{Class: LinkCrossNUMA, GBps: pcieGen4CrossSocketGBps})
			}
		}
	}
}

// addSwitchNICs adds one NIC per PCIe switch of the connectPCIePairs layout.
func addSwitchNICs(node *NodeTopology, rateGbps int) {
	for s := range 4 {
		pair := []int{2 * s, 2*s + 1}
		node.NICs = append(node.NICs, NIC{
			Name:        fmt.Sprintf("mlx5_%d", s),
			RateGbps:    rateGbps,
			NUMANode:    s / 2,
			NearestGPUs: pair,
			GPUPaths:    nicPaths(node, s/2, pair, LinkSameSwitch, LinkSameNUMA),
		})
	}
}

// nicPaths returns the path classes from a NIC on NUMA node numa to every GPU:
// near to its nearest GPUs, sameNUMA to the other GPUs of its NUMA node, SYS
// to the rest.
func nicPaths(node *NodeTopology, numa int, nearest []int, near, sameNUMA LinkClass) []LinkClass {
	paths := make([]LinkClass, len(node.GPUs))
	for g, gpu := range node.GPUs {
		paths[g] = LinkCrossNUMA
		if gpu.NUMANode == numa {
			paths[g] = sameNUMA
		}
	}
	for _, g := range nearest {
		paths[g] = near
	}
	return paths
}
