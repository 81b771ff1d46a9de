package topology

import (
	"strconv"
	"strings"
)

// TopoMatrix renders the node the way `nvidia-smi topo -m` prints it: one row
// per GPU with its link to every GPU (X, NV#, PIX, PXB, PHB, NODE, SYS) and
// to every NIC, its NUMA affinity, then the NIC legend. Cells are separated
// by tabs as nvidia-smi does. The NIC rows and the CPU affinity column are
// left out: the model does not carry NIC-to-NIC paths or CPU lists, and
// neither matters for placement.
func (n *NodeTopology) TopoMatrix() string {
	var b strings.Builder
	for i := range n.GPUs {
		b.WriteString("\tGPU" + strconv.Itoa(i))
	}
	for j := range n.NICs {
		b.WriteString("\tNIC" + strconv.Itoa(j))
	}
	b.WriteString("\tNUMA Affinity\n")
	for i, gpu := range n.GPUs {
		b.WriteString("GPU" + strconv.Itoa(i))
		for j := range n.GPUs {
			b.WriteByte('\t')
			if i == j {
				b.WriteString(" X ")
			} else {
				b.WriteString(n.Links[i][j].Token())
			}
		}
		for _, nic := range n.NICs {
			b.WriteString("\t" + nic.PathTo(n, i).String())
		}
		b.WriteByte('\t')
		if gpu.NUMANode < 0 {
			b.WriteString("N/A")
		} else {
			b.WriteString(strconv.Itoa(gpu.NUMANode))
		}
		b.WriteByte('\n')
	}
	if len(n.NICs) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		for j, nic := range n.NICs {
			b.WriteString("  NIC" + strconv.Itoa(j) + ": " + nic.Name + "\n")
		}
	}
	return b.String()
}
