package topology

// Find returns the domain whose ID is id. It walks the tree: for the rare
// lookups of a domain named in an API object (a preemption's held domain),
// not for planning.
func (t *Tree) Find(id string) (*Domain, bool) {
	stack := []*Domain{t.root}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if d.ID == id {
			return d, true
		}
		stack = append(stack, d.Children...)
	}
	return nil, false
}
