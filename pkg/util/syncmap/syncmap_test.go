package syncmap

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMap runs scripts of operations on a fresh Map and compares what each
// Load saw.
func TestMap(t *testing.T) {
	type op struct {
		load   string // the key to Load, or
		update string // the key to Update with f, or
		delete string // the key to Delete
		f      func(v int, ok bool) (int, bool)
	}
	type loaded struct {
		V  int
		OK bool
	}
	add := func(n int) func(int, bool) (int, bool) {
		return func(v int, _ bool) (int, bool) { return v + n, true }
	}
	read := func(v int, ok bool) (int, bool) { return v, ok }
	drop := func(v int, _ bool) (int, bool) { return v, false }
	cases := []struct {
		name string
		ops  []op
		want []loaded
	}{
		{
			name: "zero map is empty",
			ops:  []op{{load: "a"}},
			want: []loaded{{0, false}},
		},
		{
			name: "update stores",
			ops:  []op{{update: "a", f: add(2)}, {update: "a", f: add(3)}, {load: "a"}, {load: "b"}},
			want: []loaded{{5, true}, {0, false}},
		},
		{
			name: "update that only reads leaves the map as it was",
			ops:  []op{{update: "a", f: read}, {load: "a"}, {update: "b", f: add(1)}, {update: "b", f: read}, {load: "b"}},
			want: []loaded{{0, false}, {1, true}},
		},
		{
			name: "update without keep deletes",
			ops:  []op{{update: "a", f: add(1)}, {update: "a", f: drop}, {load: "a"}, {update: "c", f: drop}, {load: "c"}},
			want: []loaded{{0, false}, {0, false}},
		},
		{
			name: "delete",
			ops:  []op{{delete: "a"}, {update: "a", f: add(1)}, {update: "b", f: add(2)}, {delete: "a"}, {load: "a"}, {load: "b"}},
			want: []loaded{{0, false}, {2, true}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m Map[string, int]
			var got []loaded
			for _, o := range tc.ops {
				switch {
				case o.load != "":
					v, ok := m.Load(o.load)
					got = append(got, loaded{v, ok})
				case o.update != "":
					m.Update(o.update, o.f)
				default:
					m.Delete(o.delete)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("loads (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestMapConcurrent changes one Map from many goroutines; run with -race.
// Update is one read-modify-write, so no increment is lost.
func TestMapConcurrent(t *testing.T) {
	const goroutines, rounds = 8, 500
	var m Map[int, map[string]int]
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				m.Update(i%4, func(v map[string]int, _ bool) (map[string]int, bool) {
					if v == nil {
						v = map[string]int{}
					}
					v["n"]++
					return v, true
				})
				m.Load(g % 4)
				if i%100 == 99 {
					m.Delete(4) // never stored: the others are unaffected
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for k := range 4 {
		m.Update(k, func(v map[string]int, ok bool) (map[string]int, bool) {
			total += v["n"]
			return v, ok
		})
	}
	if want := goroutines * rounds; total != want {
		t.Errorf("counted %d increments, want %d", total, want)
	}
}
