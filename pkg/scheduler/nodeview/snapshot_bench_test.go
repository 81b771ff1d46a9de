package nodeview

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// BenchmarkSnapshotBooked measures the snapshot a plan starts with, on
// BenchmarkPlanGang's loaded HGX nodes whose every other node holds a pod
// the books know (reserved through a plan or assigned, and not yet in
// the node's NodeTopology), as in a burst where agents lag the binds. Each
// iteration books one more pod, on the next node, as the pod bound between
// two plans does: the snapshot reads the books of the nodes that changed.
func BenchmarkSnapshotBooked(b *testing.B) {
	for _, nodes := range []int{5000, 25000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			v, books, _ := newTestView(b, nil)
			nts, infos := schedtesting.HGXCluster(b, nodes, true)
			for _, nt := range nts {
				v.Set(nil, nt)
			}
			for i := 0; i < nodes; i += 2 {
				books.Assign(types.UID(fmt.Sprintf("booked-%d", i)), fmt.Sprintf("node-%04d", i), topology.NewGPUSet(7))
			}
			pod := utiltesting.MakePod("p", "ns").GPUs(8).PodGroup("g").Obj()
			req := v.Request(pod)
			if _, err := v.Snapshot(pod, "ns/g", req, infos); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				books.Assign(types.UID(fmt.Sprintf("next-%d", i)), fmt.Sprintf("node-%04d", (2*i+1)%nodes), topology.NewGPUSet(6))
				i++
				if _, err := v.Snapshot(pod, "ns/g", req, infos); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
