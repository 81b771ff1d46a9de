package discovery

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

func TestProfileBackend(t *testing.T) {
	for _, name := range topology.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			p, _ := topology.LookupProfile(name)
			report, err := ProfileBackend{Profile: p, NodeName: "n1", Clique: "c0ffee.7"}.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.Node()
			if err != nil {
				t.Fatal(err)
			}
			if got := report.Topology.NumGPUs(); got != want.NumGPUs() {
				t.Fatalf("%d GPUs, want the profile's %d", got, want.NumGPUs())
			}
			if diff := cmp.Diff(want.Links, report.Topology.Links); diff != "" {
				t.Errorf("links differ from the profile's (-want,+got):\n%s", diff)
			}
			if err := report.Topology.Validate(); err != nil {
				t.Errorf("report does not validate: %v", err)
			}
			if got := report.UsableGPUs(); got != report.Topology.AllGPUs() {
				t.Errorf("usable GPUs %v, want all of %v", got, report.Topology.AllGPUs())
			}
			if report.Topology.GPUs[0].UUID != "GPU-fake-n1-0" {
				t.Errorf("GPU 0 UUID %q, want one derived from the node name", report.Topology.GPUs[0].UUID)
			}
			if d := report.Topology.NVLinkDomain; d != nil && (d.ClusterUUID != "c0ffee" || d.CliqueID != 7) {
				t.Errorf("NVLink domain %+v, want cluster c0ffee clique 7 from the label", *d)
			}
		})
	}
}

func TestProfileBackendStandaloneTray(t *testing.T) {
	p, ok := topology.LookupProfile("gb200-nvl72")
	if !ok {
		t.Fatal("no gb200-nvl72 profile")
	}
	report, err := ProfileBackend{Profile: p, NodeName: "tray-3"}.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := report.Topology.NVLinkDomain; d == nil || d.ClusterUUID != "standalone-tray-3" {
		t.Errorf("NVLink domain %+v, want one of its own for a tray without a clique label", d)
	}
}

func TestNVMLBackendNeedsALibrary(t *testing.T) {
	if _, err := (NVMLBackend{}).Discover(context.Background()); err == nil {
		t.Error("Discover without an NVML library succeeded")
	}
}
