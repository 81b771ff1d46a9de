// Package keyset is a set of strings safe for concurrent use: the gangs a
// scheduler turned away, the profiles a plugin serves, the pods already
// warned about.
package keyset

import (
	"maps"
	"slices"
	"sync"
)

// Set is a set of strings safe for concurrent use. The zero value is not
// ready: use New.
type Set struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// New returns an empty set.
func New() *Set { return &Set{keys: map[string]struct{}{}} }

// Add adds key.
func (s *Set) Add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = struct{}{}
}

// Has reports whether key is in the set.
func (s *Set) Has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[key]
	return ok
}

// Empty reports whether the set is empty.
func (s *Set) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys) == 0
}

// AddNew adds key and reports whether it was not in the set: one call of
// many racing for the same key gets true.
func (s *Set) AddNew(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return false
	}
	s.keys[key] = struct{}{}
	return true
}

// Remove removes key.
func (s *Set) Remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// Take empties the set and returns what it held, sorted.
func (s *Set) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Sorted(maps.Keys(s.keys))
	clear(s.keys)
	return out
}

// Sorted returns what the set holds, sorted.
func (s *Set) Sorted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.keys))
}
