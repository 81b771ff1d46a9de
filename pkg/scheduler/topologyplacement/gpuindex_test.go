package topologyplacement

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// BenchmarkGPUIndex5000 indexes 5,000 NodeTopology objects of one profile,
// the scale issue 15 measures, and reports the heap the index keeps
// (retained-B) besides what building it allocates.
func BenchmarkGPUIndex5000(b *testing.B) {
	const nodes = 5000
	objs := make([]*v1alpha1.NodeTopology, nodes)
	for i := range objs {
		objs[i] = hgxNodeTopology(b, fmt.Sprintf("node-%d", i))
	}
	var retained uint64
	b.ReportAllocs()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := newGPUIndex()
		for _, nt := range objs {
			x.set(nt)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		retained = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(x)
	}
	b.ReportMetric(float64(retained), "retained-B")
}
