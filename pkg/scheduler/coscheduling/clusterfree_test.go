package coscheduling

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestClusterFreeFollowsTheNodes: through a random run of pods added and
// removed, nodes' allocatable changed, nodes added, dropped and reordered
// in the list, and requests naming new resources (past maxFreeColumns
// too), clusterFree's sums equal the nodes' free capacity summed afresh,
// and its answer is the fresh sums' answer.
func TestClusterFreeFollowsTheNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logger := klog.Background()
	var nodes []fwk.NodeInfo
	newNode := func(i int) fwk.NodeInfo {
		ni := framework.NewNodeInfo()
		ni.SetNode(gpuNode(fmt.Sprintf("n-%d", i)))
		return ni
	}
	for i := range 20 {
		nodes = append(nodes, newNode(i))
	}
	// Resources a request may name: the nodes have the first four.
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods, lockstep.GPUResource, v1.ResourceEphemeralStorage}
	for i := range 10 {
		names = append(names, v1.ResourceName(fmt.Sprintf("example.com/r%d", i)))
	}
	f := &clusterFree{}
	pod := 0
	answers := map[bool]int{}
	for step := range 2000 {
		switch op := rng.IntN(10); {
		case op < 4: // a pod added
			ni := nodes[rng.IntN(len(nodes))]
			if ni == nil {
				continue
			}
			p := onNode(utiltesting.MakePod(fmt.Sprintf("p-%d", pod), "ns").GPUs(int64(rng.IntN(3))).Obj(), ni.Node().Name)
			p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(rng.IntN(4000)), resource.DecimalSI)
			pod++
			ni.(*framework.NodeInfo).AddPod(p)
		case op < 6: // a pod removed
			ni := nodes[rng.IntN(len(nodes))]
			if ni == nil || len(ni.GetPods()) == 0 {
				continue
			}
			if err := ni.RemovePod(logger, ni.GetPods()[rng.IntN(len(ni.GetPods()))].GetPod()); err != nil {
				t.Fatal(err)
			}
		case op < 7: // a node's allocatable changed (a device plugin's count, say)
			ni := nodes[rng.IntN(len(nodes))]
			if ni == nil {
				continue
			}
			n := ni.Node().DeepCopy()
			n.Status.Allocatable[lockstep.GPUResource] = *resource.NewQuantity(int64(rng.IntN(9)), resource.DecimalSI)
			ni.SetNode(n)
		case op < 8: // the list reordered
			rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		case op < 9: // a node added, or a nil entry
			if rng.IntN(4) == 0 {
				nodes = append(nodes, nil)
			} else {
				nodes = append(nodes, newNode(100+step))
			}
		default: // a node dropped
			if len(nodes) > 1 {
				i := rng.IntN(len(nodes))
				nodes = append(nodes[:i], nodes[i+1:]...)
			}
		}
		request := v1.ResourceList{}
		for range 1 + rng.IntN(4) {
			r := names[rng.IntN(len(names))]
			if rng.IntN(3) > 0 {
				r = names[rng.IntN(4)]
			}
			request[r] = *resource.NewQuantity(int64(rng.IntN(100)), resource.DecimalSI)
		}
		got := f.covers(nodes, request)
		answers[got]++

		want := map[v1.ResourceName]int64{}
		for _, r := range f.resources {
			want[r] = 0
			for _, ni := range nodes {
				if ni != nil && ni.Node() != nil {
					want[r] += freeAmount(ni, r)
				}
			}
		}
		sums := map[v1.ResourceName]int64{}
		for c, r := range f.resources {
			sums[r] = f.sum[c]
		}
		if diff := cmp.Diff(want, sums); diff != "" {
			t.Fatalf("step %d: sums (-fresh,+kept):\n%s", step, diff)
		}
		wantCovers := true
		for r, q := range request {
			if want[r] < wantAmount(r, q) {
				wantCovers = false
			}
		}
		if got != wantCovers {
			t.Fatalf("step %d: covers(%v) = %v, the fresh sums say %v", step, request, got, wantCovers)
		}
		if len(f.resources) > maxFreeColumns {
			t.Fatalf("step %d: %d columns, want at most %d", step, len(f.resources), maxFreeColumns)
		}
	}
	if answers[true] == 0 || answers[false] == 0 {
		t.Errorf("answers %v: the run never tried both outcomes", answers)
	}
}

// TestClusterFreeRoundsTheRequestUp: a fractional request is compared
// rounded up, so the bound never says yes where upstream's exact
// quantities would say no.
func TestClusterFreeRoundsTheRequestUp(t *testing.T) {
	ni := framework.NewNodeInfo()
	n := gpuNode("a")
	n.Status.Allocatable[v1.ResourceCPU] = resource.MustParse("1500m")
	n.Status.Allocatable["example.com/r"] = resource.MustParse("2")
	ni.SetNode(n)
	for _, tc := range []struct {
		request v1.ResourceList
		want    bool
	}{
		{v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m")}, true},
		{v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500500u")}, false},
		{v1.ResourceList{"example.com/r": resource.MustParse("2")}, true},
		{v1.ResourceList{"example.com/r": resource.MustParse("2001m")}, false},
	} {
		if got := (&clusterFree{}).covers([]fwk.NodeInfo{ni}, tc.request); got != tc.want {
			t.Errorf("covers(%v) = %v, want %v", tc.request, got, tc.want)
		}
	}
}
