package placement

// maxJournal bounds the journal: past it the journal starts over, and a
// reader that had not caught up is told to read every node again. A plan's
// worth of changes is its gang's nodes, far fewer.
const maxJournal = 1 << 16

// Changes returns the nodes whose Booked or DrainedFor may have changed
// since position since of the journal (0 for the books' start, or a next
// returned before), in order and possibly repeated, and the position to
// ask from next time. complete is false when the journal no longer reaches
// back to since: any node may have changed. The slice is the books' own,
// valid until they next change.
//
// Why. A planner's view of a node is worth keeping between plans only if
// it learns which nodes the books changed: reading Booked and DrainedFor
// of every node per plan was most of a snapshot's cost at 25,000 nodes.
func (b *Books) Changes(since uint64) (nodes []string, next uint64, complete bool) {
	next = b.journalStart + uint64(len(b.journal))
	if since < b.journalStart || since > next {
		return nil, next, false
	}
	return b.journal[since-b.journalStart:], next, true
}

// touch records that node's Booked or DrainedFor changed (Changes).
func (b *Books) touch(node string) {
	if len(b.journal) == maxJournal {
		b.journalStart += maxJournal
		b.journal = b.journal[:0]
	}
	b.journal = append(b.journal, node)
}
