package fabric

import (
	"bytes"
	"fmt"
	"testing"
)

// syntheticFatTree renders, in ibnetdiscover's format, a three-tier fabric:
// pods of 32 leaves and 32 spines, 16 cores, and hosts of 8 adapters spread
// over 8 rail leaves. Only switch blocks are written; adapters are known from
// the switches' port lines, as in a filtered file.
func syntheticFatTree(hosts int) []byte {
	const leavesPerPod, spinesPerPod, cores, rails, hostsPerLeaf = 32, 32, 16, 8, 32
	leaves := (hosts + hostsPerLeaf - 1) / hostsPerLeaf * rails
	pods := (leaves + leavesPerPod - 1) / leavesPerPod
	var b bytes.Buffer
	leafGUID := func(i int) int { return 0x100000 + i }
	spineGUID := func(pod, i int) int { return 0x200000 + pod*spinesPerPod + i }
	coreGUID := func(i int) int { return 0x300000 + i }
	for l := 0; l < leaves; l++ {
		fmt.Fprintf(&b, "\nswitchguid=0x%x(%x)\nSwitch\t64 \"S-%016x\"\t\t# \"leaf-%d\" enhanced port 0 lid %d lmc 0\n", leafGUID(l), leafGUID(l), leafGUID(l), l, l+1)
		group, rail := l/rails, l%rails
		for h := 0; h < hostsPerLeaf; h++ {
			host := group*hostsPerLeaf + h
			ca := 0x900000 + host*rails + rail
			fmt.Fprintf(&b, "[%d]\t\"H-%016x\"[1](%x) \t\t# \"gpu-%05d mlx5_%d\" lid %d 4xNDR\n", h+1, ca, ca, host, rail, 1000+ca%60000)
		}
		pod := l / leavesPerPod
		for s := 0; s < spinesPerPod; s++ {
			fmt.Fprintf(&b, "[%d]\t\"S-%016x\"[%d]\t\t# \"spine\" lid 1 4xNDR\n", hostsPerLeaf+s+1, spineGUID(pod, s), l%leavesPerPod+1)
		}
	}
	for p := 0; p < pods; p++ {
		for s := 0; s < spinesPerPod; s++ {
			g := spineGUID(p, s)
			fmt.Fprintf(&b, "\nswitchguid=0x%x(%x)\nSwitch\t64 \"S-%016x\"\t\t# \"spine\" enhanced port 0 lid 1 lmc 0\n", g, g, g)
			for c := 0; c < cores; c++ {
				fmt.Fprintf(&b, "[%d]\t\"S-%016x\"[%d]\t\t# \"core\" lid 2 4xNDR\n", leavesPerPod+c+1, coreGUID(c), (p*spinesPerPod+s)%64+1)
			}
		}
	}
	return b.Bytes()
}

func BenchmarkTopology(b *testing.B) {
	for _, hosts := range []int{512, 4096} {
		data := syntheticFatTree(hosts)
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				fab, err := ParseIBNetDiscover(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				if topo := fab.Topology(Options{}); topo.Depth != 3 || len(topo.Assignments) != hosts {
					b.Fatalf("depth %d, %d hosts; want 3, %d", topo.Depth, len(topo.Assignments), hosts)
				}
			}
		})
	}
}
