package topology

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// diff returns "" when want and got are deeply equal and a "(-want,+got)"
// report otherwise, so tests read like the cmp.Diff ones elsewhere in the
// project without a third-party dependency.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("-want %+v\n+got  %+v", want, got)
}

// textDiff compares two texts line by line after collapsing runs of spaces
// and tabs, so expected matrices can be aligned with spaces in the test. It
// returns "" when they match and a "(-want,+got)" line report otherwise.
func textDiff(want, got string) string {
	w, g := normalizedLines(want), normalizedLines(got)
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n-%s\n+%s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

func normalizedLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return lines
}

// mustNode returns the node topology of a built-in profile.
func mustNode(t testing.TB, name string) *NodeTopology {
	t.Helper()
	p, ok := LookupProfile(name)
	if !ok {
		t.Fatalf("no profile %q", name)
	}
	node, err := p.Node()
	if err != nil {
		t.Fatalf("profile %q: Node() error: %v", name, err)
	}
	return node
}

// mustSelector returns a selector for a built-in profile.
func mustSelector(t testing.TB, name string) *Selector {
	t.Helper()
	sel, err := NewSelector(mustNode(t, name))
	if err != nil {
		t.Fatalf("profile %q: NewSelector error: %v", name, err)
	}
	return sel
}
