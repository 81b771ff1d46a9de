package keyset

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSet(t *testing.T) {
	s := New()
	if !s.Empty() {
		t.Fatal("a new set is not empty")
	}
	s.Add("b")
	if !s.AddNew("a") || s.AddNew("a") {
		t.Error("AddNew: want true for a new key, then false")
	}
	if !s.Has("a") || s.Has("c") {
		t.Error("Has disagrees with what was added")
	}
	s.Remove("a")
	s.Add("c")
	if diff := cmp.Diff([]string{"b", "c"}, s.Take()); diff != "" {
		t.Errorf("Take (-want,+got):\n%s", diff)
	}
	if !s.Empty() {
		t.Error("the set is not empty after Take")
	}
}

// TestSetAddNewOncePerKey: of many goroutines adding one key, exactly one
// is told it was new.
func TestSetAddNewOncePerKey(t *testing.T) {
	s := New()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.AddNew("k") {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d goroutines were told the key was new, want 1", won)
	}
}
