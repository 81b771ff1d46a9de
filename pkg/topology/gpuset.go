package topology

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxGPUs is the largest number of GPUs a node may have: GPU sets are 64-bit
// masks, which keeps set arithmetic allocation-free in the scheduler's hot path.
const MaxGPUs = 64

// GPUSet is a set of GPU indices of one node; bit i is GPU i.
type GPUSet uint64

// NewGPUSet returns the set of the given indices. Indices outside [0, MaxGPUs)
// are ignored.
func NewGPUSet(indices ...int) GPUSet {
	var s GPUSet
	for _, i := range indices {
		if i >= 0 && i < MaxGPUs {
			s |= 1 << uint(i)
		}
	}
	return s
}

// AllGPUs returns the set of GPUs 0 to n-1.
func AllGPUs(n int) GPUSet {
	if n >= MaxGPUs {
		return ^GPUSet(0)
	}
	if n <= 0 {
		return 0
	}
	return 1<<uint(n) - 1
}

// Len returns the number of GPUs in the set.
func (s GPUSet) Len() int { return bits.OnesCount64(uint64(s)) }

// Has reports whether GPU i is in the set.
func (s GPUSet) Has(i int) bool { return i >= 0 && i < MaxGPUs && s&(1<<uint(i)) != 0 }

// Indices returns the GPU indices in ascending order.
func (s GPUSet) Indices() []int {
	out := make([]int, 0, s.Len())
	for rest := uint64(s); rest != 0; rest &= rest - 1 {
		out = append(out, bits.TrailingZeros64(rest))
	}
	return out
}

// String formats the set as "{0,3}".
func (s GPUSet) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, idx := range s.Indices() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(idx))
	}
	b.WriteByte('}')
	return b.String()
}

// List formats the set as a comma-separated list of indices, "0,3": the
// form of the lockstep.dev/gpus pod annotation.
func (s GPUSet) List() string {
	var b strings.Builder
	for i, idx := range s.Indices() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(idx))
	}
	return b.String()
}

// ParseGPUList parses a list written by List. Every index must be in range
// and listed once.
func ParseGPUList(list string) (GPUSet, error) {
	var set GPUSet
	for _, field := range strings.Split(list, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || i < 0 || i >= MaxGPUs {
			return 0, fmt.Errorf("GPU list %q: %q is not a GPU index", list, field)
		}
		if set.Has(i) {
			return 0, fmt.Errorf("GPU list %q: GPU %d listed twice", list, i)
		}
		set |= NewGPUSet(i)
	}
	return set, nil
}

// lowerIndices reports whether a comes before b when both are listed in
// ascending order and compared element by element: the set holding the
// lowest GPU in which they differ wins. It is the final, deterministic
// tie-break of GPU set selection.
func lowerIndices(a, b GPUSet) bool {
	d := a ^ b
	return a&(d&-d) != 0
}
