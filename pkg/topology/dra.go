package topology

import "fmt"

// DRADevice is a device of a DRA driver's ResourceSlice, reduced to what
// joins it to a node's GPUs.
type DRADevice struct {
	// Driver is the slice's driver, e.g. "gpu.nvidia.com".
	Driver string
	// Name is the device name, unique within the driver's pool.
	Name string
	// UUID is the device's uuid attribute; empty when it has none.
	UUID string
}

// UnjoinedDevice is a device of the driver that names no GPU of the node, and
// why.
type UnjoinedDevice struct {
	Device DRADevice
	Reason string
}

// DRAJoin maps a node's DRA devices to its GPUs.
type DRAJoin struct {
	// GPUs maps the name of each joined device to the index of the GPU with
	// its UUID. No two devices map to one GPU.
	GPUs map[string]int
	// Unjoined are the driver's devices that map to no GPU, in input order.
	Unjoined []UnjoinedDevice
	// Unpublished are the indexes of the node's GPUs no device maps to,
	// ascending: GPUs the driver does not offer (a MIG-partitioned GPU
	// publishes its MIG devices instead), or offers under a UUID the node's
	// topology does not know.
	Unpublished []int
}

// JoinDRADevices joins the devices driver publishes for a node to the node's
// GPUs by NVML UUID, the one identity both NVIDIA's DRA driver (the uuid
// attribute) and the topology agent (NodeTopology spec) read from NVML.
// Device names and indexes are not keys: the driver names a GPU by its
// minor number, which need not be its NVML index. Devices of other drivers
// are skipped; a device without a UUID, with a UUID of no GPU of the node
// (a MIG device, a GPU of another node), with a name or UUID an earlier
// device already joined, or whose UUID two GPUs of the node share, is
// reported in Unjoined.
func JoinDRADevices(node *NodeTopology, driver string, devices []DRADevice) DRAJoin {
	const shared = -1
	byUUID := make(map[string]int, len(node.GPUs))
	for i, g := range node.GPUs {
		if g.UUID == "" {
			continue
		}
		if _, dup := byUUID[g.UUID]; dup {
			byUUID[g.UUID] = shared
			continue
		}
		byUUID[g.UUID] = i
	}
	join := DRAJoin{GPUs: make(map[string]int, len(node.GPUs))}
	joinedBy := make(map[int]string, len(node.GPUs))
	unjoined := func(d DRADevice, format string, args ...any) {
		join.Unjoined = append(join.Unjoined, UnjoinedDevice{Device: d, Reason: fmt.Sprintf(format, args...)})
	}
	for _, d := range devices {
		if d.Driver != driver {
			continue
		}
		gpu, known := byUUID[d.UUID]
		_, seen := join.GPUs[d.Name]
		prev, taken := joinedBy[gpu]
		switch {
		case seen:
			unjoined(d, "device name %q appears twice", d.Name)
		case d.UUID == "":
			unjoined(d, "no uuid attribute")
		case !known:
			unjoined(d, "uuid %s names no GPU of the node", d.UUID)
		case gpu == shared:
			unjoined(d, "uuid %s is shared by several GPUs of the node", d.UUID)
		case taken:
			unjoined(d, "uuid %s is GPU %d's, already joined to device %s", d.UUID, gpu, prev)
		default:
			join.GPUs[d.Name] = gpu
			joinedBy[gpu] = d.Name
		}
	}
	for i := range node.GPUs {
		if _, taken := joinedBy[i]; !taken {
			join.Unpublished = append(join.Unpublished, i)
		}
	}
	return join
}
