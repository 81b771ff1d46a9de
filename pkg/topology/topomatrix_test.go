package topology

import "testing"

// The expected matrices are the real machines' `nvidia-smi topo -m` GPU rows
// (GPU and NIC columns, NUMA affinity), NIC columns in NIC index order. Runs
// of whitespace are compared as one space so the columns can be aligned.
func TestTopoMatrix(t *testing.T) {
	tests := []struct {
		profile string
		want    string
	}{
		{
			// DGX H100: NVSwitch makes every pair NV18; one ConnectX-7 per
			// GPU on its PCIe switch.
			profile: "hgx-h100",
			want: `
        GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NIC0  NIC1  NIC2  NIC3  NIC4  NIC5  NIC6  NIC7  NUMA Affinity
GPU0     X    NV18  NV18  NV18  NV18  NV18  NV18  NV18  PIX   NODE  NODE  NODE  SYS   SYS   SYS   SYS   0
GPU1    NV18   X    NV18  NV18  NV18  NV18  NV18  NV18  NODE  PIX   NODE  NODE  SYS   SYS   SYS   SYS   0
GPU2    NV18  NV18   X    NV18  NV18  NV18  NV18  NV18  NODE  NODE  PIX   NODE  SYS   SYS   SYS   SYS   0
GPU3    NV18  NV18  NV18   X    NV18  NV18  NV18  NV18  NODE  NODE  NODE  PIX   SYS   SYS   SYS   SYS   0
GPU4    NV18  NV18  NV18  NV18   X    NV18  NV18  NV18  SYS   SYS   SYS   SYS   PIX   NODE  NODE  NODE  1
GPU5    NV18  NV18  NV18  NV18  NV18   X    NV18  NV18  SYS   SYS   SYS   SYS   NODE  PIX   NODE  NODE  1
GPU6    NV18  NV18  NV18  NV18  NV18  NV18   X    NV18  SYS   SYS   SYS   SYS   NODE  NODE  PIX   NODE  1
GPU7    NV18  NV18  NV18  NV18  NV18  NV18  NV18   X    SYS   SYS   SYS   SYS   NODE  NODE  NODE  PIX   1

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
  NIC4: mlx5_4
  NIC5: mlx5_5
  NIC6: mlx5_6
  NIC7: mlx5_7
`,
		},
		{
			// DGX-1V hybrid cube-mesh; EDR NICs PIX to their PLX pair, PHB
			// to the socket's other pair.
			profile: "dgx1-v100",
			want: `
        GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NIC0  NIC1  NIC2  NIC3  NUMA Affinity
GPU0     X    NV1   NV1   NV2   NV2   SYS   SYS   SYS   PIX   PHB   SYS   SYS   0
GPU1    NV1    X    NV2   NV1   SYS   NV2   SYS   SYS   PIX   PHB   SYS   SYS   0
GPU2    NV1   NV2    X    NV2   SYS   SYS   NV1   SYS   PHB   PIX   SYS   SYS   0
GPU3    NV2   NV1   NV2    X    SYS   SYS   SYS   NV1   PHB   PIX   SYS   SYS   0
GPU4    NV2   SYS   SYS   SYS    X    NV1   NV1   NV2   SYS   SYS   PIX   PHB   1
GPU5    SYS   NV2   SYS   SYS   NV1    X    NV2   NV1   SYS   SYS   PIX   PHB   1
GPU6    SYS   SYS   NV1   SYS   NV1   NV2    X    NV2   SYS   SYS   PHB   PIX   1
GPU7    SYS   SYS   SYS   NV1   NV2   NV1   NV2    X    SYS   SYS   PHB   PIX   1

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
`,
		},
		{
			// 8x L40S, a GPU pair and a NIC per PCIe switch, two switches per
			// socket.
			profile: "l40s-pcie",
			want: `
        GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NIC0  NIC1  NIC2  NIC3  NUMA Affinity
GPU0     X    PIX   NODE  NODE  SYS   SYS   SYS   SYS   PIX   NODE  SYS   SYS   0
GPU1    PIX    X    NODE  NODE  SYS   SYS   SYS   SYS   PIX   NODE  SYS   SYS   0
GPU2    NODE  NODE   X    PIX   SYS   SYS   SYS   SYS   NODE  PIX   SYS   SYS   0
GPU3    NODE  NODE  PIX    X    SYS   SYS   SYS   SYS   NODE  PIX   SYS   SYS   0
GPU4    SYS   SYS   SYS   SYS    X    PIX   NODE  NODE  SYS   SYS   PIX   NODE  1
GPU5    SYS   SYS   SYS   SYS   PIX    X    NODE  NODE  SYS   SYS   PIX   NODE  1
GPU6    SYS   SYS   SYS   SYS   NODE  NODE   X    PIX   SYS   SYS   NODE  PIX   1
GPU7    SYS   SYS   SYS   SYS   NODE  NODE  PIX    X    SYS   SYS   NODE  PIX   1

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
`,
		},
		{
			// The same PCIe layout with three NVLink bridges per pair.
			profile: "a100-pcie-nvlink",
			want: `
        GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NIC0  NIC1  NIC2  NIC3  NUMA Affinity
GPU0     X    NV12  NODE  NODE  SYS   SYS   SYS   SYS   PIX   NODE  SYS   SYS   0
GPU1    NV12   X    NODE  NODE  SYS   SYS   SYS   SYS   PIX   NODE  SYS   SYS   0
GPU2    NODE  NODE   X    NV12  SYS   SYS   SYS   SYS   NODE  PIX   SYS   SYS   0
GPU3    NODE  NODE  NV12   X    SYS   SYS   SYS   SYS   NODE  PIX   SYS   SYS   0
GPU4    SYS   SYS   SYS   SYS    X    NV12  NODE  NODE  SYS   SYS   PIX   NODE  1
GPU5    SYS   SYS   SYS   SYS   NV12   X    NODE  NODE  SYS   SYS   PIX   NODE  1
GPU6    SYS   SYS   SYS   SYS   NODE  NODE   X    NV12  SYS   SYS   NODE  PIX   1
GPU7    SYS   SYS   SYS   SYS   NODE  NODE  NV12   X    SYS   SYS   NODE  PIX   1

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
`,
		},
		{
			// GB200 compute tray: NV18 through the rack's NVLink switches;
			// NICs hang off the Graces, which nvidia-smi reports as SYS.
			profile: "gb200-nvl72",
			want: `
        GPU0  GPU1  GPU2  GPU3  NIC0  NIC1  NIC2  NIC3  NUMA Affinity
GPU0     X    NV18  NV18  NV18  SYS   SYS   SYS   SYS   0
GPU1    NV18   X    NV18  NV18  SYS   SYS   SYS   SYS   0
GPU2    NV18  NV18   X    NV18  SYS   SYS   SYS   SYS   1
GPU3    NV18  NV18  NV18   X    SYS   SYS   SYS   SYS   1

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
  NIC2: mlx5_2
  NIC3: mlx5_3
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			got := mustNode(t, tt.profile).TopoMatrix()
			if d := textDiff(tt.want, got); d != "" {
				t.Errorf("TopoMatrix() (-want,+got):\n%s\ngot:\n%s", d, got)
			}
		})
	}
}

func TestTopoMatrixCellsParse(t *testing.T) {
	// Every GPU-to-GPU cell the renderer writes is a token ParseTopoToken
	// accepts with the same class family and link count.
	for _, p := range Profiles() {
		node := mustNode(t, p.Name)
		for i := range node.GPUs {
			for j := range node.GPUs {
				if i == j {
					continue
				}
				l := node.Link(i, j)
				got, err := ParseTopoToken(l.Token())
				if err != nil {
					t.Fatalf("%s: cell %d,%d %q: %v", p.Name, i, j, l.Token(), err)
				}
				if got.Class.IsNVLink() != l.Class.IsNVLink() || got.NVLinks != l.NVLinks {
					t.Errorf("%s: cell %d,%d parsed as %+v, want %+v", p.Name, i, j, got, l)
				}
			}
		}
	}
}

func TestTopoMatrixUnknownNUMA(t *testing.T) {
	n := twoGPUNode()
	n.GPUs[1].NUMANode = -1
	n.NICs = nil
	want := `
	GPU0	GPU1	NUMA Affinity
GPU0	 X 	NV4	0
GPU1	NV4	 X 	N/A
`
	if got := n.TopoMatrix(); got != want[1:] {
		t.Errorf("TopoMatrix() (-want,+got):\n-%q\n+%q", want[1:], got)
	}
}
