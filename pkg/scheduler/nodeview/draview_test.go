package nodeview

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
)

// poolDump is what a plan reads of a pool of a deviceView.
type poolDump struct {
	Free     string
	Order    []int
	Roots    []int
	Unjoined int
}

// dump is everything a plan reads of v, by pool.
func (v *deviceView) dump() map[string]poolDump {
	defer v.read()()
	out := map[string]poolDump{}
	for name, pool := range v.pools {
		out[name] = poolDump{Free: pool.free.List(), Order: pool.join.order.GPUs, Roots: pool.join.order.Roots, Unjoined: len(pool.join.unjoined)}
	}
	return out
}

// nodeUUIDs are GPU UUIDs of node's eight GPUs, of a version: a node
// reports new ones after a GPU swap.
func nodeUUIDs(node string, version int) []string {
	out := make([]string, 8)
	for i := range out {
		out[i] = fmt.Sprintf("GPU-%s-%d-v%d", node, i, version)
	}
	return out
}

// viewSlice is a slice of node's pool of generation gen with devices
// gpu-<i> for each i in gpus, their UUIDs of version 1 and PCIe roots
// two GPUs each.
func viewSlice(name, node string, gen int64, gpus ...int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: lockstep.DRAGPUDriver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 2}},
	}
	uuids := nodeUUIDs(node, 1)
	for _, i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				lockstep.DRAUUIDAttribute:     {StringValue: ptr.To(uuids[i])},
				lockstep.DRAPCIeRootAttribute: {StringValue: ptr.To(fmt.Sprintf("root-%d", i/2))},
			}})
	}
	return s
}

// viewClaim is claim ns/name allocated the GPU driver's devices named
// pool/device, or not allocated when there are none.
func viewClaim(name string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if len(devices) == 0 {
		return c
	}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		pool, dev, _ := cutSlash(d)
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: lockstep.DRAGPUDriver, Pool: pool, Device: dev})
	}
	return c
}

func cutSlash(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// TestDeviceViewEvents applies the event sequences a cluster sends to a
// deviceView and checks what plans read after each.
func TestDeviceViewEvents(t *testing.T) {
	type step struct {
		name  string
		apply func(v *deviceView)
		want  map[string]poolDump
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	roots := []int{0, 0, 1, 1, 2, 2, 3, 3}
	full := poolDump{Free: "0,1,2,3,4,5,6,7", Order: all, Roots: roots}
	a1 := viewSlice("n1-a", "n1", 1, 0, 1, 2, 3)
	b1 := viewSlice("n1-b", "n1", 1, 4, 5, 6, 7)
	a2 := viewSlice("n1-a", "n1", 2, 0, 1)
	b2 := viewSlice("n1-b", "n1", 2, 2, 3)
	steps := []step{
		{name: "UUIDs before any slice", apply: func(v *deviceView) { v.OnUUIDs("n1", nodeUUIDs("n1", 1)) }, want: map[string]poolDump{}},
		{name: "the first of two slices", apply: func(v *deviceView) { v.OnSlice(nil, a1) },
			want: map[string]poolDump{"n1": {Free: "0,1,2,3", Order: all[:4], Roots: roots[:4]}}},
		{name: "devices split across two slices", apply: func(v *deviceView) { v.OnSlice(nil, b1) },
			want: map[string]poolDump{"n1": full}},
		{name: "a resync's update of the same object", apply: func(v *deviceView) { v.OnSlice(b1, b1) },
			want: map[string]poolDump{"n1": full}},
		{name: "a claim allocated", apply: func(v *deviceView) {
			v.OnClaim(viewClaim("c", "n1/gpu-1", "n1/gpu-6"))
		}, want: map[string]poolDump{"n1": {Free: "0,2,3,4,5,7", Order: all, Roots: roots}}},
		{name: "another driver's device and another pool", apply: func(v *deviceView) {
			c := viewClaim("other", "n1/gpu-0", "n9/gpu-0")
			c.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
			v.OnClaim(c)
		}, want: map[string]poolDump{"n1": {Free: "0,2,3,4,5,7", Order: all, Roots: roots}}},
		{name: "the claim deallocated", apply: func(v *deviceView) { v.OnClaim(viewClaim("c")) },
			want: map[string]poolDump{"n1": full}},
		{name: "allocated again, then deleted as a tombstone", apply: func(v *deviceView) {
			v.OnClaim(viewClaim("c", "n1/gpu-3"))
			v.OnClaimDelete(cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: viewClaim("c", "n1/gpu-3")})
		}, want: map[string]poolDump{"n1": full}},
		{name: "a claim on a device of the next generation", apply: func(v *deviceView) { v.OnClaim(viewClaim("d", "n1/gpu-2")) },
			want: map[string]poolDump{"n1": {Free: "0,1,3,4,5,6,7", Order: all, Roots: roots}}},
		{name: "the first slice of a new generation replaces the old ones", apply: func(v *deviceView) { v.OnSlice(a1, a2) },
			want: map[string]poolDump{"n1": {Free: "0,1", Order: all[:2], Roots: roots[:2]}}},
		{name: "the second slice of the new generation", apply: func(v *deviceView) { v.OnSlice(b1, b2) },
			want: map[string]poolDump{"n1": {Free: "0,1,3", Order: all[:4], Roots: roots[:4]}}},
		{name: "new UUIDs that no device has", apply: func(v *deviceView) { v.OnUUIDs("n1", nodeUUIDs("n1", 2)) },
			want: map[string]poolDump{"n1": {Free: "", Order: nil, Roots: []int{}, Unjoined: 4}}},
		{name: "the UUIDs back", apply: func(v *deviceView) { v.OnUUIDs("n1", nodeUUIDs("n1", 1)) },
			want: map[string]poolDump{"n1": {Free: "0,1,3", Order: all[:4], Roots: roots[:4]}}},
		{name: "a slice deleted", apply: func(v *deviceView) { v.OnSliceDelete(b2) },
			want: map[string]poolDump{"n1": {Free: "0,1", Order: all[:2], Roots: roots[:2]}}},
		{name: "the pool removed, its last slice as a tombstone", apply: func(v *deviceView) {
			v.OnSliceDelete(cache.DeletedFinalStateUnknown{Key: "n1-a", Obj: a2})
		}, want: map[string]poolDump{}},
		{name: "a slice of another node's pool, and a network-attached one", apply: func(v *deviceView) {
			s := viewSlice("x", "n1", 1, 0)
			s.Spec.Pool.Name = "n2"
			v.OnSlice(nil, s)
			s = viewSlice("y", "n1", 1, 0)
			s.Spec.NodeName = nil
			v.OnSlice(nil, s)
		}, want: map[string]poolDump{}},
	}
	v := newDeviceView(klog.Background())
	for _, s := range steps {
		s.apply(v)
		if diff := cmp.Diff(s.want, v.dump()); diff != "" {
			t.Errorf("%s: pools (-want,+got):\n%s", s.name, diff)
		}
	}
	if v.unjoined != 0 {
		t.Errorf("%d unjoined devices counted with no pool left", v.unjoined)
	}
}

// TestDeviceViewRandomEvents applies a seeded random sequence of slice,
// claim and UUID events, tombstones and resyncs among them, and checks
// that the view equals one rebuilt from scratch from the final objects.
func TestDeviceViewRandomEvents(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			nodes := []string{"n0", "n1", "n2", "n3"}
			v := newDeviceView(klog.Background())
			objects := map[string]*resourcev1.ResourceSlice{}
			claims := map[string]*resourcev1.ResourceClaim{}
			uuids := map[string][]string{}
			randomDevices := func() []int {
				var out []int
				for i := range 8 {
					if rng.IntN(3) > 0 {
						out = append(out, i)
					}
				}
				return out
			}
			for range 400 {
				node := nodes[rng.IntN(len(nodes))]
				switch rng.IntN(9) {
				case 0, 1, 2: // a slice added or replaced
					name := fmt.Sprintf("%s-%c", node, 'a'+rng.IntN(3))
					s := viewSlice(name, node, int64(1+rng.IntN(3)), randomDevices()...)
					if rng.IntN(8) == 0 {
						s.Spec.Pool.Name = nodes[rng.IntN(len(nodes))]
					}
					if rng.IntN(10) == 0 {
						s.Spec.Driver = "other.example.com"
					}
					v.OnSlice(objects[name], s)
					objects[name] = s
				case 3: // a slice deleted, maybe as a tombstone
					for name, s := range objects {
						var obj any = s
						if rng.IntN(2) == 0 {
							obj = cache.DeletedFinalStateUnknown{Key: name, Obj: s}
						}
						v.OnSliceDelete(obj)
						delete(objects, name)
						break
					}
				case 4: // a resync
					for _, s := range objects {
						v.OnSlice(s, s)
					}
					for _, c := range claims {
						v.OnClaim(c)
					}
				case 5, 6: // a claim allocated, deallocated or reallocated
					name := fmt.Sprint("c", rng.IntN(6))
					var devices []string
					for range rng.IntN(3) {
						devices = append(devices, fmt.Sprintf("%s/gpu-%d", nodes[rng.IntN(len(nodes))], rng.IntN(8)))
					}
					c := viewClaim(name, devices...)
					v.OnClaim(c)
					claims[name] = c
				case 7: // a claim deleted
					name := fmt.Sprint("c", rng.IntN(6))
					if c, ok := claims[name]; ok {
						var obj any = c
						if rng.IntN(2) == 0 {
							obj = cache.DeletedFinalStateUnknown{Key: "ns/" + name, Obj: c}
						}
						v.OnClaimDelete(obj)
						delete(claims, name)
					}
				case 8: // a node's UUIDs changed or forgotten
					u := nodeUUIDs(node, 1+rng.IntN(2))
					if rng.IntN(4) == 0 {
						u = nil
					}
					v.OnUUIDs(node, u)
					if u == nil {
						delete(uuids, node)
					} else {
						uuids[node] = u
					}
				}
			}
			var finalSlices []*resourcev1.ResourceSlice
			for _, s := range objects {
				finalSlices = append(finalSlices, s)
			}
			var finalClaims []*resourcev1.ResourceClaim
			for _, c := range claims {
				finalClaims = append(finalClaims, c)
			}
			want := rebuiltDeviceView(klog.Background(), finalSlices, finalClaims, func(n string) []string { return uuids[n] })
			if diff := cmp.Diff(want.dump(), v.dump()); diff != "" {
				t.Errorf("incremental view differs from the rebuilt one (-rebuilt,+incremental):\n%s", diff)
			}
			if v.unjoined != want.unjoined {
				t.Errorf("unjoined = %d, rebuilt %d", v.unjoined, want.unjoined)
			}
			if diff := cmp.Diff(takenDump(want), takenDump(v)); diff != "" {
				t.Errorf("taken devices (-rebuilt,+incremental):\n%s", diff)
			}
		})
	}
}

// takenDump is v.taken by device's string.
func takenDump(v *deviceView) map[string]int {
	out := map[string]int{}
	for id, n := range v.taken {
		out[id.String()] = n
	}
	return out
}

// TestDeviceViewReadsTrackerWhileReserving checks that a plan reads the
// claim tracker's allocations from a pod's Reserve until the claim
// informer shows its claims allocated, or the pod is unreserved.
func TestDeviceViewReadsTrackerWhileReserving(t *testing.T) {
	pod := schedtesting.ClaimPod("m", "four")
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To("m-gpus")}}
	v := newDeviceView(klog.Background())
	check := func(step string, want bool) {
		t.Helper()
		if got := v.needsTracker(); got != want {
			t.Errorf("%s: needsTracker = %v, want %v", step, got, want)
		}
	}
	check("start", false)
	v.reservingClaims(pod.Namespace, podClaimNames(pod))
	check("reserved", true)
	v.OnClaim(viewClaim("m-gpus"))
	check("claim seen unallocated", true)
	v.OnClaim(viewClaim("m-gpus", "n1/gpu-0"))
	check("claim seen allocated", false)
	v.unreservedClaims(pod.Namespace, podClaimNames(pod))
	check("unreserved after", false)

	v.OnClaim(viewClaim("m-gpus"))
	v.reservingClaims(pod.Namespace, podClaimNames(pod))
	check("reserved again", true)
	v.unreservedClaims(pod.Namespace, podClaimNames(pod))
	check("unreserved before its allocation was written", false)

	// A view that follows no devices (a scheduler without DRA) records
	// nothing.
	none, _, _ := newTestView(t, nil)
	none.Reserved(pod)
	none.Unreserved(pod)
}

// TestDeviceViewConcurrent runs informer events against plans' reads; run
// with -race.
func TestDeviceViewConcurrent(t *testing.T) {
	p := newDRAWorld(t, 2)
	dra := p.dra
	devices := p.followDevices()
	gpus := draNodeTopology(t, "d1").Spec.GPUs
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			old := dra.GPUSlices[1]
			devices.OnSlice(old, gpuSlice("d2", i%8))
			devices.OnClaim(viewClaim("c", fmt.Sprintf("d1/gpu-%d", i%8)))
			devices.OnClaimDelete(viewClaim("c"))
			p.specs.keepUUIDs("d1", gpus)
		}
	}()
	for range 50 {
		if _, err := p.snapshot(p.pods[0], "ns/g#4", p.nodes); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestDRASnapshotFollowsAllocations plans on a deviceView fed by events:
// an allocation in flight counts from the pod's Reserve (the tracker's),
// then as the claim informer shows it, until the claim is deallocated.
func TestDRASnapshotFollowsAllocations(t *testing.T) {
	p := newDRAWorld(t, 2)
	dra := p.dra
	devices := p.followDevices()
	pod := p.pods[0]
	other := schedtesting.ClaimPod("other", "four")
	other.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To("other-gpus")}}
	devices.OnClaim(viewClaim("other-gpus"))
	steps := []struct {
		name   string
		change func()
		want   map[string]string
	}{
		{name: "start", change: func() {}, want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"}},
		{
			name: "allocated in flight: the tracker's",
			change: func() {
				p.Reserved(other)
				dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-0"))
			},
			want: map[string]string{"d1": "1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "the allocation watched: the view's",
			change: func() {
				devices.OnClaim(viewClaim("other-gpus", "d1/gpu-0", "d1/gpu-1"))
				// The tracker is no longer read.
				dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d2", "gpu-7"))
			},
			want: map[string]string{"d1": "2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name:   "deallocated",
			change: func() { devices.OnClaim(viewClaim("other-gpus")) },
			want:   map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
	}
	for _, step := range steps {
		step.change()
		if diff := cmp.Diff(step.want, freeBy(t, p, pod)); diff != "" {
			t.Errorf("%s: free GPUs by node (-want,+got):\n%s", step.name, diff)
		}
	}
}

// A claim that lets go of devices says so (deviceView.freed), so that
// gangs whose "does not fit" was remembered while the devices were taken
// plan again; allocating, a resync and other drivers' devices do not.
func TestDeviceViewSaysWhenClaimsFreeDevices(t *testing.T) {
	v := newDeviceView(klog.Background())
	freed := 0
	v.freed = func() { freed++ }
	v.OnUUIDs("n1", nodeUUIDs("n1", 1))
	v.OnSlice(nil, viewSlice("n1-a", "n1", 1, 0, 1, 2, 3))
	other := viewClaim("other", "n1/gpu-0")
	other.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	for _, step := range []struct {
		name  string
		apply func()
		want  int
	}{
		{"allocated", func() { v.OnClaim(viewClaim("c", "n1/gpu-1", "n1/gpu-2")) }, 0},
		{"a resync of the same claim", func() { v.OnClaim(viewClaim("c", "n1/gpu-1", "n1/gpu-2")) }, 0},
		{"another driver's device", func() { v.OnClaim(other) }, 0},
		{"deallocated", func() { v.OnClaim(viewClaim("c")) }, 1},
		{"allocated again", func() { v.OnClaim(viewClaim("c", "n1/gpu-3")) }, 1},
		{"deleted as a tombstone", func() {
			v.OnClaimDelete(cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: viewClaim("c", "n1/gpu-3")})
		}, 2},
		{"a claim never allocated deleted", func() { v.OnClaimDelete(viewClaim("never")) }, 2},
	} {
		step.apply()
		if freed != step.want {
			t.Errorf("%s: freed called %d times in all, want %d", step.name, freed, step.want)
		}
	}
}
