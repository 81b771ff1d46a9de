package nodeview

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// agentNodeTopology is what a topology agent publishes for an HGX node:
// per-node GPU UUIDs, bus IDs and NIC GUIDs, a generation and managedFields.
func agentNodeTopology(t testing.TB, name string) *v1alpha1.NodeTopology {
	nt := hgxNodeTopology(t, name)
	nt.UID = types.UID("uid-" + name)
	nt.Generation = 1
	nt.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "agent"}}
	nt.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID("node-" + name)}}
	nt.Labels = map[string]string{"lockstep.dev/profile": "hgx-h100"}
	for i := range nt.Spec.GPUs {
		nt.Spec.GPUs[i].UUID = fmt.Sprintf("GPU-%s-%d", name, i)
		nt.Spec.GPUs[i].PCIBusID = fmt.Sprintf("00000000:%02x:00.0", i)
	}
	for i := range nt.Spec.NICs {
		nt.Spec.NICs[i].GUID = fmt.Sprintf("%s-guid-%d", name, i)
		nt.Spec.NICs[i].PCIBusID = fmt.Sprintf("00000000:%02x:00.1", i)
	}
	return nt
}

func slimmed(t *testing.T, specs *specTable, nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
	t.Helper()
	obj, err := specs.slim(nt)
	if err != nil {
		t.Fatalf("slim(%s): %v", nt.Name, err)
	}
	return obj.(*v1alpha1.NodeTopology)
}

// TestSpecTableSharesOneProfile: two nodes of one profile keep one copy of
// their GPU list, links and NICs and one placement model, and what planning
// reads survives the slimming.
func TestSpecTableSharesOneProfile(t *testing.T) {
	specs := newSpecTable()
	a := slimmed(t, specs, agentNodeTopology(t, "a"))
	b := slimmed(t, specs, agentNodeTopology(t, "b"))

	wantMeta := metav1.ObjectMeta{Name: "a", UID: "uid-a", Generation: 1}
	if diff := cmp.Diff(wantMeta, a.ObjectMeta); diff != "" {
		t.Errorf("metadata kept (-want +got):\n%s", diff)
	}
	for _, nt := range []*v1alpha1.NodeTopology{a, b} {
		for _, g := range nt.Spec.GPUs {
			if g.UUID != "" || g.PCIBusID != "" {
				t.Errorf("%s: GPU %d keeps uuid %q, bus %q", nt.Name, g.Index, g.UUID, g.PCIBusID)
			}
		}
		for _, n := range nt.Spec.NICs {
			if n.GUID != "" || n.PCIBusID != "" {
				t.Errorf("%s: NIC %s keeps guid %q, bus %q", nt.Name, n.Name, n.GUID, n.PCIBusID)
			}
		}
	}
	if &a.Spec.GPUs[0] != &b.Spec.GPUs[0] || &a.Spec.Links[0] != &b.Spec.Links[0] || &a.Spec.NICs[0] != &b.Spec.NICs[0] {
		t.Errorf("nodes of one profile do not share their spec's slices")
	}
	hwA, errA := specs.topology(&a.Spec)
	hwB, errB := specs.topology(&b.Spec)
	if errA != nil || errB != nil || hwA != hwB {
		t.Fatalf("topology: %p, %v and %p, %v; want one shared model", hwA, errA, hwB, errB)
	}
	// The shared model plans like the node's own, identifiers aside.
	own, err := agentNodeTopology(t, "a").Spec.ToTopology()
	if err != nil {
		t.Fatal(err)
	}
	for i := range own.GPUs {
		own.GPUs[i].UUID, own.GPUs[i].PCIBusID = "", ""
	}
	if diff := cmp.Diff(own, hwA); diff != "" {
		t.Errorf("shared model differs from the node's own (-own +shared):\n%s", diff)
	}
	// A transform must be idempotent.
	again := slimmed(t, specs, a)
	if &again.Spec.GPUs[0] != &a.Spec.GPUs[0] {
		t.Errorf("slimming a slim object replaced its GPUs")
	}
}

// TestSpecTableKeepsInvalidWhole: a spec that is invalid only through the
// identifiers slim drops (duplicate GPU UUIDs) stays invalid to the GPU
// index and the health check.
func TestSpecTableKeepsInvalidWhole(t *testing.T) {
	specs := newSpecTable()
	bad := agentNodeTopology(t, "bad")
	bad.Spec.GPUs[1].UUID = bad.Spec.GPUs[0].UUID
	got := slimmed(t, specs, bad)
	if got.Spec.GPUs[1].UUID == "" {
		t.Fatalf("identifiers dropped from an invalid spec")
	}
	if _, err := specs.topology(&got.Spec); err == nil {
		t.Errorf("topology of a spec with duplicate UUIDs: no error")
	}
	x := newGPUIndex(specs)
	x.set(got)
	if _, ok := x.get("bad"); ok {
		t.Errorf("invalid NodeTopology indexed")
	}
}

// TestSpecTableReusesSpecOnStatusUpdate: an update with the stored object's
// UID and generation (the status changed) takes the stored spec; a new
// generation is slimmed afresh.
func TestSpecTableReusesSpecOnStatusUpdate(t *testing.T) {
	specs := newSpecTable()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	specs.stored = store.GetByKey
	first := slimmed(t, specs, agentNodeTopology(t, "n"))
	if err := store.Add(first); err != nil {
		t.Fatal(err)
	}

	status := agentNodeTopology(t, "n")
	status.Status.FreeGPUs = 3
	status.Spec.Links[0].NVLinks = 99 // not read: the generation says the spec is unchanged
	got := slimmed(t, specs, status)
	if &got.Spec.Links[0] != &first.Spec.Links[0] {
		t.Errorf("status update did not reuse the stored spec")
	}

	changed := agentNodeTopology(t, "n")
	changed.Generation = 2
	changed.Spec.NVLinkDomain = &v1alpha1.NVLinkDomain{ClusterUUID: "c", CliqueID: 7, BandwidthMBps: 900_000}
	got = slimmed(t, specs, changed)
	if got.Spec.NVLinkDomain == nil || got.Spec.NVLinkDomain.CliqueID != 7 {
		t.Errorf("new generation kept the old spec: nvlinkDomain %+v", got.Spec.NVLinkDomain)
	}

	other := agentNodeTopology(t, "n")
	other.UID = "recreated"
	other.Spec.GPUProduct = "recreated"
	if got := slimmed(t, specs, other); got.Spec.GPUProduct != "recreated" {
		t.Errorf("an object recreated under the same name took the old spec")
	}
}

// TestSpecTableBounded: past maxSharedSpecs distinct values the table stops
// remembering new ones and stores them unshared, still converting them.
func TestSpecTableBounded(t *testing.T) {
	specs := newSpecTable()
	var last *v1alpha1.NodeTopology
	for i := range maxSharedSpecs + 2 {
		nt := agentNodeTopology(t, fmt.Sprintf("n%d", i))
		nt.Spec.NVLinkDomain = &v1alpha1.NVLinkDomain{ClusterUUID: "c", CliqueID: int64(i), BandwidthMBps: 900_000}
		last = slimmed(t, specs, nt)
	}
	if n := len(specs.nvl); n != maxSharedSpecs {
		t.Errorf("%d NVLink domains kept, want the bound %d", n, maxSharedSpecs)
	}
	if n := len(specs.converted); n > maxSharedSpecs {
		t.Errorf("%d models kept, want at most %d", n, maxSharedSpecs)
	}
	hw, err := specs.topology(&last.Spec)
	if err != nil || hw.NVLinkDomain == nil || hw.NVLinkDomain.CliqueID != uint32(maxSharedSpecs+1) {
		t.Errorf("topology past the bound = %+v, %v; want clique %d", hw, err, maxSharedSpecs+1)
	}
}

// BenchmarkNodeTopologyStore5000 stores 5,000 agent-published NodeTopology
// objects of one profile and indexes them, as the scheduler's informer does,
// with and without the spec table, and reports the heap the store and the
// index keep (retained-B) besides what building them allocates.
func BenchmarkNodeTopologyStore5000(b *testing.B) {
	for _, slim := range []bool{false, true} {
		b.Run(fmt.Sprintf("slim=%t", slim), func(b *testing.B) {
			const nodes = 5000
			var retained int64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				objs := make([]*v1alpha1.NodeTopology, nodes)
				for i := range objs {
					objs[i] = agentNodeTopology(b, fmt.Sprintf("node-%d", i))
				}
				b.StartTimer()
				var specs *specTable
				store := cache.NewStore(cache.MetaNamespaceKeyFunc)
				if slim {
					specs = newSpecTable()
					specs.stored = store.GetByKey
				}
				x := newGPUIndex(specs)
				for i, nt := range objs {
					var obj any = nt
					if slim {
						var err error
						if obj, err = specs.slim(nt); err != nil {
							b.Fatal(err)
						}
					} else {
						nt.ManagedFields = nil
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
					x.set(obj.(*v1alpha1.NodeTopology))
					objs[i] = nil
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				retained = int64(after.HeapAlloc) - int64(before.HeapAlloc)
				runtime.KeepAlive(x)
				runtime.KeepAlive(store)
				b.StartTimer()
			}
			b.ReportMetric(float64(retained), "retained-B")
		})
	}
}
