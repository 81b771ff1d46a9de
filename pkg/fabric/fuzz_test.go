package fabric

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addFixtureSeeds seeds the corpus with every testdata file ending in ext.
func addFixtureSeeds(f *testing.F, ext string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*"+ext))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no %s fixtures: %v", ext, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// checkTopology holds for every Topology, whatever the input.
func checkTopology(t *testing.T, topo *Topology) {
	t.Helper()
	for i, a := range topo.Assignments {
		if a.Host == "" {
			t.Errorf("assignment %d has no host", i)
		}
		if i > 0 && topo.Assignments[i-1].Host >= a.Host {
			t.Errorf("assignments not sorted by unique host: %q before %q", topo.Assignments[i-1].Host, a.Host)
		}
		if len(a.Domains) > topo.Depth {
			t.Errorf("host %s has %d domains, more than depth %d", a.Host, len(a.Domains), topo.Depth)
		}
		for _, d := range a.Domains {
			if !isLabelValue(d) {
				t.Errorf("host %s: domain %q is not a valid label value", a.Host, d)
			}
		}
		if a.AcceleratorDomain != "" && !isLabelValue(a.AcceleratorDomain) {
			t.Errorf("host %s: accelerator domain %q is not a valid label value", a.Host, a.AcceleratorDomain)
		}
	}
}

func FuzzParseIBNetDiscover(f *testing.F) {
	addFixtureSeeds(f, ".ibnetdiscover")
	for _, seed := range []string{
		"Switch\t4 \"S-1\"\t\t# \"leaf\" enhanced port 0 lid 1 lmc 0\n[1]\t\"H-2\"[1](2) \t\t# \"n mlx5_0\" lid 2 4xHDR\n",
		"Ca\t1 \"H-1\"\t\t# \"n mlx5_0\"\n[1](1) \t\"S-2\"[1][ext 3]\t\t# lid 4 lmc 0 \"leaf\" lid 2 4xHDR s=4 w=2 v=4\n",
		"Chassis 1 (guid 0x1)\n\n# Spine Nodes\nswitchguid=0x1(1)\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fab, err := ParseIBNetDiscover(bytes.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ibnetdiscover") {
				t.Errorf("error %q does not say it is about ibnetdiscover input", err)
			}
			return
		}
		topo := fab.Topology(Options{})
		checkTopology(t, topo)
		for _, a := range topo.Assignments {
			if len(a.Domains) != 0 && len(a.Domains) != topo.Depth {
				t.Errorf("host %s has %d domains, want 0 or depth %d", a.Host, len(a.Domains), topo.Depth)
			}
		}
	})
}

func FuzzParseTopograph(f *testing.F) {
	addFixtureSeeds(f, ".json")
	f.Add([]byte(`{"instances": [{"id": "n1", "network_layers": ["MF0;leaf:Q/U1", ""], "nvlink_domain": "d"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := ParseTopograph(bytes.NewReader(data))
		if err != nil {
			return
		}
		checkTopology(t, topo)
	})
}
