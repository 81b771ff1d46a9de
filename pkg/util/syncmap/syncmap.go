// Package syncmap holds Map, a typed map guarded by a mutex: the small
// in-memory books that controllers and plugins keep per job or per pod, and
// read and change from event handlers and reconciles at once.
package syncmap

import "sync"

// Map is a map from K to V that is safe for concurrent use. The zero Map is
// empty and ready to use; a Map must not be copied after first use.
//
// Unlike sync.Map it is typed and offers Update, a read-modify-write under
// the one lock, which is what most such books do: count once per
// incarnation, keep the first time seen, prune what went stale.
type Map[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// Load returns k's value and whether k has one. The value is returned as
// stored: one that points at state Update changes (a map, a pointer) must
// be read through Update instead, under the lock.
func (m *Map[K, V]) Load(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

// Update calls f with k's value (ok false and v the zero V when k has none)
// under the map's lock, and stores the value f returns, or deletes k when
// f returns keep false. Nothing else runs on the map while f does, so f
// may change what v points at, or only read it: returning v, ok leaves
// the map as it was. f must not call the Map.
func (m *Map[K, V]) Update(k K, f func(v V, ok bool) (_ V, keep bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	v, keep := f(v, ok)
	switch {
	case keep && m.m == nil:
		m.m = map[K]V{k: v}
	case keep:
		m.m[k] = v
	default:
		delete(m.m, k)
	}
}

// Delete removes k's value, if any.
func (m *Map[K, V]) Delete(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}
