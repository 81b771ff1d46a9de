package topology

import (
	"fmt"
	"testing"
)

// dgx1Order is the DGX-1 as NVIDIA's driver publishes it: gpu-0..gpu-7 in
// index order, 0-3 under one PCIe root and 4-7 under the other.
func dgx1Order() *DRAOrder {
	return NewDRAOrder([]int{0, 1, 2, 3, 4, 5, 6, 7},
		[]string{"pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", "pci0000:80", "pci0000:80"})
}

func TestNewDRAOrder(t *testing.T) {
	got := NewDRAOrder([]int{3, 1, 0, 2}, []string{"pci0000:80", "", "pci0000:00", "pci0000:80"})
	want := &DRAOrder{GPUs: []int{3, 1, 0, 2}, Roots: []int{0, NoPCIeRoot, 1, 0}}
	if d := diff(want, got); d != "" {
		t.Errorf("NewDRAOrder (-want,+got):\n%s", d)
	}
}

func TestDRAOrderPick(t *testing.T) {
	tests := []struct {
		name    string
		order   *DRAOrder
		free    GPUSet
		k       int
		oneRoot bool
		want    GPUSet
		wantOK  bool
	}{
		{
			// The DGX-1 case the constraint exists for: without it the
			// allocator takes the first free devices across both roots.
			name: "unconstrained takes the first free in order", order: dgx1Order(),
			free: AllGPUs(8) &^ NewGPUSet(0), k: 4,
			want: NewGPUSet(1, 2, 3, 4), wantOK: true,
		},
		{
			name: "one root: the first root with enough free wins", order: dgx1Order(),
			free: AllGPUs(8) &^ NewGPUSet(0), k: 4, oneRoot: true,
			want: NewGPUSet(4, 5, 6, 7), wantOK: true,
		},
		{
			name: "one root: the first root when it has enough", order: dgx1Order(),
			free: AllGPUs(8) &^ NewGPUSet(0), k: 3, oneRoot: true,
			want: NewGPUSet(1, 2, 3), wantOK: true,
		},
		{
			name: "one root: its first free devices in order", order: dgx1Order(),
			free: NewGPUSet(0, 2, 3, 5, 6, 7), k: 2, oneRoot: true,
			want: NewGPUSet(0, 2), wantOK: true,
		},
		{
			// Eight GPUs never fit one root of four: the unconstrained
			// alternative takes them.
			name: "one root: no root has enough, the fallback", order: dgx1Order(),
			free: AllGPUs(8), k: 8, oneRoot: true,
			want: AllGPUs(8), wantOK: true,
		},
		{
			name: "one root: fallback across roots", order: dgx1Order(),
			free: NewGPUSet(1, 2, 5, 6), k: 3, oneRoot: true,
			want: NewGPUSet(1, 2, 5), wantOK: true,
		},
		{
			// Root order is device order, not GPU index order.
			name:  "device order decides, not indexes",
			order: NewDRAOrder([]int{4, 5, 6, 7, 0, 1, 2, 3}, []string{"b", "b", "b", "b", "a", "a", "a", "a"}),
			free:  AllGPUs(8), k: 2, oneRoot: true,
			want: NewGPUSet(4, 5), wantOK: true,
		},
		{
			name:  "devices without a root meet no constraint",
			order: NewDRAOrder([]int{0, 1, 2}, []string{"", "", "a"}),
			free:  AllGPUs(3), k: 1, oneRoot: true,
			want: NewGPUSet(2), wantOK: true,
		},
		{
			name: "too few free", order: dgx1Order(),
			free: NewGPUSet(1, 2), k: 3,
			want: NewGPUSet(1, 2), wantOK: false,
		},
		{
			name: "no GPUs asked", order: dgx1Order(),
			free: AllGPUs(8), k: 0,
			want: 0, wantOK: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.order.Pick(tc.free, tc.k, tc.oneRoot)
			if d := diff([]any{tc.want, tc.wantOK}, []any{got, ok}); d != "" {
				t.Errorf("Pick(%v, %d, %t) (-want,+got):\n%s", tc.free, tc.k, tc.oneRoot, d)
			}
		})
	}
}

// TestDRAOrderPickNVLink ties the prediction to the links: on a DGX-1
// whose GPU 0 is taken, one PCIe root first is an NVLink-connected set of
// four and first free is not.
func TestDRAOrderPickNVLink(t *testing.T) {
	node := mustNode(t, "dgx1-v100")
	free := node.AllGPUs() &^ NewGPUSet(0)
	for _, oneRoot := range []bool{false, true} {
		set, _ := dgx1Order().Pick(free, 4, oneRoot)
		if got := node.NVLinkConnected(set); got != oneRoot {
			t.Errorf("oneRoot %t: set %v NVLinkConnected = %t, want %t", oneRoot, set, got, oneRoot)
		}
	}
}

func TestNVLinkConnected(t *testing.T) {
	dgx1 := mustNode(t, "dgx1-v100")
	tests := []struct {
		set  GPUSet
		want bool
	}{
		{NewGPUSet(0, 1, 2, 3), true},
		{NewGPUSet(0, 4), true},
		{NewGPUSet(1, 2, 3, 4), false},
		{NewGPUSet(0, 5), false},
		{NewGPUSet(3), true},
		{NewGPUSet(8), false},
	}
	for _, tc := range tests {
		if got := dgx1.NVLinkConnected(tc.set); got != tc.want {
			t.Errorf("NVLinkConnected(%v) = %t, want %t", tc.set, got, tc.want)
		}
	}
}

func BenchmarkDRAOrderPick(b *testing.B) {
	order := dgx1Order()
	for _, oneRoot := range []bool{false, true} {
		b.Run(fmt.Sprintf("oneRoot=%t", oneRoot), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				order.Pick(AllGPUs(8)&^NewGPUSet(0), 4, oneRoot)
			}
		})
	}
}
