package topology

import "testing"

func TestGPUSet(t *testing.T) {
	s := NewGPUSet(3, 0, 7, 64, -1)
	if got, want := s.String(), "{0,3,7}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := s.Len(); got != 3 {
		t.Errorf("Len() = %d, want 3", got)
	}
	if !s.Has(3) || s.Has(1) || s.Has(64) || s.Has(-1) {
		t.Errorf("Has gives wrong membership for %v", s)
	}
	if d := diff([]int{0, 3, 7}, s.Indices()); d != "" {
		t.Errorf("Indices() (-want,+got):\n%s", d)
	}
	if got := AllGPUs(8); got != 0xff {
		t.Errorf("AllGPUs(8) = %#x, want 0xff", uint64(got))
	}
	if got := AllGPUs(64); got != ^GPUSet(0) {
		t.Errorf("AllGPUs(64) = %#x, want all ones", uint64(got))
	}
}

func TestLowerIndices(t *testing.T) {
	tests := []struct {
		a, b GPUSet
		want bool
	}{
		{NewGPUSet(0, 3), NewGPUSet(1, 2), true},
		{NewGPUSet(1, 2), NewGPUSet(0, 3), false},
		{NewGPUSet(0, 1, 5), NewGPUSet(0, 2, 3), true},
		{NewGPUSet(4, 5), NewGPUSet(4, 5), false},
	}
	for _, tt := range tests {
		if got := lowerIndices(tt.a, tt.b); got != tt.want {
			t.Errorf("lowerIndices(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestGPUListRoundTrip(t *testing.T) {
	set, err := ParseGPUList("4, 5,0")
	if err != nil || set != NewGPUSet(0, 4, 5) || set.List() != "0,4,5" {
		t.Errorf("ParseGPUList = %v, %v; List = %q", set, err, set.List())
	}
	for _, bad := range []string{"", "a", "1,1", "-1", "64", "1,,2"} {
		if _, err := ParseGPUList(bad); err == nil {
			t.Errorf("ParseGPUList(%q) succeeded", bad)
		}
	}
}
