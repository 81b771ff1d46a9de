package topology

import (
	"testing"
)

func TestInterner(t *testing.T) {
	profileNode := func(t *testing.T, name string) *NodeTopology {
		t.Helper()
		p, ok := LookupProfile(name)
		if !ok {
			t.Fatalf("no profile %q", name)
		}
		n, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	withUUIDs := func(n *NodeTopology) *NodeTopology {
		n.GPUs = append([]GPU(nil), n.GPUs...)
		for i := range n.GPUs {
			n.GPUs[i].UUID = "GPU-" + string(rune('a'+i))
		}
		return n
	}
	otherRate := func(n *NodeTopology) *NodeTopology {
		n.NICs = append([]NIC(nil), n.NICs...)
		n.NICs[0].RateGbps++
		return n
	}
	tests := []struct {
		name string
		a, b func(t *testing.T) *NodeTopology
		// shared says which of GPUs, Links, NICs b gets from a.
		sharedGPUs, sharedLinks, sharedNICs bool
	}{
		{
			name:       "same profile shares everything",
			a:          func(t *testing.T) *NodeTopology { return profileNode(t, "hgx-h100") },
			b:          func(t *testing.T) *NodeTopology { return profileNode(t, "hgx-h100") },
			sharedGPUs: true, sharedLinks: true, sharedNICs: true,
		},
		{
			name:        "per-GPU UUIDs keep their own GPU list",
			a:           func(t *testing.T) *NodeTopology { return profileNode(t, "hgx-h100") },
			b:           func(t *testing.T) *NodeTopology { return withUUIDs(profileNode(t, "hgx-h100")) },
			sharedLinks: true, sharedNICs: true,
		},
		{
			name:        "a different NIC rate keeps its own NICs",
			a:           func(t *testing.T) *NodeTopology { return profileNode(t, "hgx-h100") },
			b:           func(t *testing.T) *NodeTopology { return otherRate(profileNode(t, "hgx-h100")) },
			sharedGPUs:  true,
			sharedLinks: true,
		},
		{
			name: "different profiles share nothing",
			a:    func(t *testing.T) *NodeTopology { return profileNode(t, "hgx-h100") },
			b:    func(t *testing.T) *NodeTopology { return profileNode(t, "dgx1-v100") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInterner()
			a := in.Intern(tt.a(t))
			b := tt.b(t)
			want := *b // the values b held, deep-copied by reference
			got := in.Intern(b)
			if d := diff(&want, got); d != "" {
				t.Errorf("interned node differs from the original (-want,+got):\n%s", d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("interned node invalid: %v", err)
			}
			same := func(x, y any) bool { return x == y }
			if g := same(&a.GPUs[0], &got.GPUs[0]); g != tt.sharedGPUs {
				t.Errorf("GPUs shared = %v, want %v", g, tt.sharedGPUs)
			}
			if g := same(&a.Links[0][0], &got.Links[0][0]); g != tt.sharedLinks {
				t.Errorf("Links shared = %v, want %v", g, tt.sharedLinks)
			}
			if len(a.NICs) > 0 && len(got.NICs) > 0 {
				if g := same(&a.NICs[0], &got.NICs[0]); g != tt.sharedNICs {
					t.Errorf("NICs shared = %v, want %v", g, tt.sharedNICs)
				}
			}
		})
	}
}

// TestInternerManyNodes checks that 5,000 nodes of three profiles keep
// three copies of each part.
func TestInternerManyNodes(t *testing.T) {
	in := NewInterner()
	names := []string{"hgx-h100", "dgx1-v100", "l40s-pcie"}
	for i := range 5000 {
		p, ok := LookupProfile(names[i%len(names)])
		if !ok {
			t.Fatalf("no profile %q", names[i%len(names)])
		}
		n, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		in.Intern(n)
	}
	if got, want := in.Len(), 3*3; got != want {
		t.Errorf("distinct values = %d, want %d", got, want)
	}
}
