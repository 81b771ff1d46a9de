package topology

// GPUIdentity is what NVML reports of a profile's GPUs beyond their links:
// the facts NVIDIA's DRA driver publishes as device attributes, in the
// strings go-nvlib formats them as.
type GPUIdentity struct {
	// Name is nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3" (the profile's
	// GPUProduct is its label form).
	Name string
	// Brand is go-nvlib's GetBrandAsString: "Tesla" for V100, "Nvidia" for
	// the data-centre GPUs after it.
	Brand string
	// Architecture is go-nvlib's GetArchitectureAsString, e.g. "Hopper".
	Architecture string
	// ComputeCapability is CUDA's "<major>.<minor>".
	ComputeCapability string
	// AddressingMode is go-nvlib's GetAddressingModeAsString: "ATS" where the
	// GPU shares the CPU's page tables (Grace), "" where the platform has no
	// such mode.
	AddressingMode string
	// PCIeRoots is each GPU's PCIe root complex as sysfs names it,
	// "pci<domain>:<bus>": GPUs under one root share the value, which is
	// what a DRA claim's matchAttribute on resource.kubernetes.io/pcieRoot
	// keeps together. Which GPUs share a root is the machine's; the root bus
	// numbers of profiles whose bus ids are illustrative are illustrative too.
	PCIeRoots []string
}

// GPUIdentity returns the identity of the profile's GPUs; false for a
// profile without one.
func (p Profile) GPUIdentity() (GPUIdentity, bool) {
	switch p.Name {
	case "hgx-h100":
		// One PCIe Gen5 switch per GPU, each on its own root port stack,
		// which Linux shows as a host bridge of its own.
		return GPUIdentity{
			Name: "NVIDIA H100 80GB HBM3", Brand: "Nvidia", Architecture: "Hopper", ComputeCapability: "9.0",
			PCIeRoots: []string{"pci0000:10", "pci0000:20", "pci0000:30", "pci0000:50", "pci0000:90", "pci0000:a0", "pci0000:b0", "pci0000:d0"},
		}, true
	case "dgx1-v100":
		// Both PLX switches of a Broadwell socket hang off its one host
		// bridge: GPUs 0-3 under socket 0's root, 4-7 under socket 1's.
		return GPUIdentity{
			Name: "Tesla V100-SXM2-32GB", Brand: "Tesla", Architecture: "Volta", ComputeCapability: "7.0",
			PCIeRoots: []string{"pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", "pci0000:80", "pci0000:80"},
		}, true
	case "l40s-pcie":
		// A GPU pair per switch, each switch on a host bridge of its own.
		return GPUIdentity{
			Name: "NVIDIA L40S", Brand: "Nvidia", Architecture: "Ada Lovelace", ComputeCapability: "8.9",
			PCIeRoots: switchPairRoots(),
		}, true
	case "a100-pcie-nvlink":
		return GPUIdentity{
			Name: "NVIDIA A100 80GB PCIe", Brand: "Nvidia", Architecture: "Ampere", ComputeCapability: "8.0",
			PCIeRoots: switchPairRoots(),
		}, true
	case "gb200-nvl72":
		// Each GPU is a PCI domain of its own on its Grace's PCIe.
		return GPUIdentity{
			Name: "NVIDIA GB200", Brand: "Nvidia", Architecture: "Blackwell", ComputeCapability: "10.0", AddressingMode: "ATS",
			PCIeRoots: []string{"pci0008:00", "pci0009:00", "pci0018:00", "pci0019:00"},
		}, true
	default:
		return GPUIdentity{}, false
	}
}

// switchPairRoots are the roots of the connectPCIePairs layout: GPUs
// {0,1}, {2,3}, {4,5}, {6,7} behind one switch each, every switch on its
// own host bridge.
func switchPairRoots() []string {
	return []string{"pci0000:10", "pci0000:10", "pci0000:30", "pci0000:30", "pci0000:90", "pci0000:90", "pci0000:b0", "pci0000:b0"}
}
