package nodeview

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// draWorld is a view on DRA HGX nodes "d1" and "d2" (no nvidia.com/gpu)
// and device-plugin HGX node "p", over fake DRA objects, with members
// pods of PodGroup g claiming 4 GPUs each from template "four".
type draWorld struct {
	*View
	books *gangmanager.Books
	dra   *schedtesting.FakeDRA
	nodes []fwk.NodeInfo
	pods  []*v1.Pod
}

func newDRAWorld(t testing.TB, members int) *draWorld {
	t.Helper()
	dra := &schedtesting.FakeDRA{
		Templates: map[string]*resourcev1.ResourceClaimTemplate{"ns/four": utiltesting.MakeGPUClaimTemplate("four", "ns", 4)},
		GPUSlices: []*resourcev1.ResourceSlice{gpuSlice("d1", 0, 1, 2, 3, 4, 5, 6, 7), gpuSlice("d2", 0, 1, 2, 3, 4, 5, 6, 7)},
		Devices:   sets.New[structured.DeviceID](),
	}
	// No followed devices: each plan reads the fake's objects as they are then.
	v, books, _ := newTestView(t, dra)
	w := &draWorld{View: v, books: books, dra: dra}
	for _, name := range []string{"d1", "d2", "p"} {
		v.Set(nil, v.Slim(draNodeTopology(t, name)))
		gpus := int64(0)
		if name == "p" {
			gpus = 8
		}
		w.nodes = append(w.nodes, nodeInfo(gpuNode(name, gpus)))
	}
	for i := range members {
		w.pods = append(w.pods, schedtesting.ClaimPod(fmt.Sprintf("m-%d", i), "four"))
	}
	return w
}

// followDevices has w follow the fake's slices by events (FollowDevices),
// as the informers feed the plugin's view, and returns the device view.
func (w *draWorld) followDevices() *deviceView {
	slices, _ := w.FollowDevices()
	for _, s := range w.dra.GPUSlices {
		slices.OnAdd(s, true)
	}
	return w.devices
}

// freeBy returns each snapshot node's free GPUs for pod.
func freeBy(t *testing.T, p *draWorld, pod *v1.Pod) map[string]string {
	t.Helper()
	snap, err := p.snapshot(pod, gangmanager.PlanKey(pod, p.Request(pod).GPUs), p.nodes)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range snap.Nodes {
		out[n.Name] = n.FreeGPUs.List()
	}
	return out
}

func TestDRASnapshot(t *testing.T) {
	gpuPod := utiltesting.MakePod("x", "ns").GPUs(8).PodGroup("other").Obj()
	tests := []struct {
		name string
		// change changes the world of draPlugin before the snapshot.
		change func(t *testing.T, p *draWorld, dra *schedtesting.FakeDRA)
		pod    func(p *draWorld) *v1.Pod
		want   map[string]string
	}{
		{
			name: "a DRA pod sees the published devices of DRA nodes only",
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "an nvidia.com/gpu pod sees no free GPU on DRA nodes",
			pod:  func(*draWorld) *v1.Pod { return gpuPod },
			want: map[string]string{"d1": "", "d2": "", "p": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "devices allocated to claims, in flight or written",
			change: func(_ *testing.T, _ *draWorld, dra *schedtesting.FakeDRA) {
				dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-0"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d1", "gpu-5"))
				// Another driver's device of the same name frees nothing.
				dra.Devices.Insert(structured.MakeDeviceID("other.example.com", "d2", "gpu-1"))
			},
			want: map[string]string{"d1": "1,2,3,4,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "GPUs another gang's open slot holds",
			change: func(_ *testing.T, p *draWorld, _ *schedtesting.FakeDRA) {
				p.books.Add("ns/other#4", &placement.Plan{Members: []placement.Assignment{{Node: "d2", GPUs: topology.NewGPUSet(4, 5, 6, 7)}}}, time.Unix(0, 0))
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3"},
		},
		{
			// A pod's claims say what it holds: the books' record of it, a
			// plan's prediction the allocator need not have followed, hides
			// nothing more.
			name: "GPUs the books record for a pod",
			change: func(_ *testing.T, p *draWorld, dra *schedtesting.FakeDRA) {
				p.books.Assign("other", "d2", topology.NewGPUSet(4, 5))
				dra.Devices.Insert(structured.MakeDeviceID(lockstep.DRAGPUDriver, "d2", "gpu-0"), structured.MakeDeviceID(lockstep.DRAGPUDriver, "d2", "gpu-1"))
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "2,3,4,5,6,7"},
		},
		{
			name: "GPUs the agent reports allocated or unhealthy",
			change: func(t *testing.T, p *draWorld, _ *schedtesting.FakeDRA) {
				nt := draNodeTopology(t, "d1")
				nt.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "ns", Pod: "y", PodUID: "y", GPUs: []int32{2}}}
				nt.Status.GPUHealth = []v1alpha1.GPUHealth{{Index: 3, State: v1alpha1.GPULost}}
				p.Set(nil, nt)
			},
			want: map[string]string{"d1": "0,1,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"},
		},
		{
			name: "devices that join no GPU, and GPUs with no device",
			change: func(_ *testing.T, _ *draWorld, dra *schedtesting.FakeDRA) {
				s := gpuSlice("d2", 0, 1)
				// A device whose UUID is another node's GPU's.
				bad := gpuSlice("d1", 2).Spec.Devices[0]
				bad.Name = "gpu-2"
				s.Spec.Devices = append(s.Spec.Devices, bad)
				dra.GPUSlices[1] = s
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1"},
		},
		{
			name: "only a pool's newest generation counts",
			change: func(_ *testing.T, _ *draWorld, dra *schedtesting.FakeDRA) {
				newer := gpuSlice("d2", 6, 7)
				newer.Spec.Pool.Generation = 2
				dra.GPUSlices = append(dra.GPUSlices, newer)
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "6,7"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newDRAWorld(t, 2)
			dra := p.dra
			if tc.change != nil {
				tc.change(t, p, dra)
			}
			pod := p.pods[0]
			if tc.pod != nil {
				pod = tc.pod(p)
			}
			if diff := cmp.Diff(tc.want, freeBy(t, p, pod)); diff != "" {
				t.Errorf("free GPUs by node (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestDRAJoinsFollowChanges plans repeatedly with the joins kept between
// plans by the deviceView: a new slice, new UUIDs and a deleted slice each
// show in the next snapshot.
func TestDRAJoinsFollowChanges(t *testing.T) {
	p := newDRAWorld(t, 2)
	dra := p.dra
	devices := p.followDevices()
	pod := p.pods[0]
	steps := []struct {
		name   string
		change func(t *testing.T)
		want   map[string]string
	}{
		{name: "start", change: func(*testing.T) {}, want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1,2,3,4,5,6,7"}},
		{
			name: "d2's slice republished with two devices",
			change: func(*testing.T) {
				old := dra.GPUSlices[1]
				dra.GPUSlices[1] = gpuSlice("d2", 0, 1)
				devices.OnSlice(old, dra.GPUSlices[1])
			},
			want: map[string]string{"d1": "0,1,2,3,4,5,6,7", "d2": "0,1"},
		},
		{
			name: "d1's GPUs reported under other UUIDs",
			change: func(t *testing.T) {
				nt := draNodeTopology(t, "d1")
				for i := range nt.Spec.GPUs {
					nt.Spec.GPUs[i].UUID += "-new"
				}
				nt.Generation = 2
				if _, err := p.specs.slim(nt); err != nil {
					t.Fatal(err)
				}
				p.Set(nil, nt)
			},
			want: map[string]string{"d1": "", "d2": "0,1"},
		},
		{
			name: "d2's slice deleted",
			change: func(*testing.T) {
				devices.OnSliceDelete(cache.DeletedFinalStateUnknown{Key: dra.GPUSlices[1].Name, Obj: dra.GPUSlices[1]})
				dra.GPUSlices = dra.GPUSlices[:1]
			},
			want: map[string]string{"d1": ""},
		},
	}
	for _, step := range steps {
		step.change(t)
		if diff := cmp.Diff(step.want, freeBy(t, p, pod)); diff != "" {
			t.Errorf("%s: free GPUs by node (-want,+got):\n%s", step.name, diff)
		}
	}
	if _, kept := devices.pools["d2"]; kept {
		t.Error("the join of d2, whose slice is gone, is still kept")
	}
}
