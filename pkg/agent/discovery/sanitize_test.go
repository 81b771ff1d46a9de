package discovery_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery/discoverytest"
)

// gb200Report discovers a GB200 tray with a lost GPU, a pod holding GPUs,
// and NICs: every kind of identifier a report carries.
func gb200Report(t *testing.T) *discovery.Report {
	t.Helper()
	lib, node := profileNVML(t, "gb200-nvl72")
	lib.Devices[3].Errs["Name"] = discovery.NVMLErrorGPUIsLost
	socket := discoverytest.ServePodResources(t, &discoverytest.PodResourcesServer{Pods: kubeletPods(node.GPUs)})
	report, err := discovery.Discover(context.Background(), discovery.Options{
		NVML: lib, SysfsRoot: profileSysfs(t, node), PodResourcesSocket: socket,
	})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return report
}

func TestSanitize(t *testing.T) {
	report := gb200Report(t)
	before, err := json.Marshal(report)
	if err != nil {
		t.Fatalf("encoding report: %v", err)
	}
	sanitized, err := report.SanitizedJSON()
	if err != nil {
		t.Fatalf("SanitizedJSON: %v", err)
	}

	var secrets []string
	for _, g := range report.Topology.GPUs {
		secrets = append(secrets, g.UUID)
	}
	for _, h := range report.HCAs {
		secrets = append(secrets, h.NodeGUID)
	}
	secrets = append(secrets, report.Topology.NVLinkDomain.ClusterUUID, "trainer-0", `"ml"`)
	for _, s := range secrets {
		if !strings.Contains(string(before), s) {
			t.Errorf("the report does not contain %q: the test checks nothing", s)
		}
		if strings.Contains(string(sanitized), s) {
			t.Errorf("the sanitized report still contains %q", s)
		}
	}

	var loaded discovery.Report
	if err := json.Unmarshal(sanitized, &loaded); err != nil {
		t.Fatalf("loading the sanitized report: %v", err)
	}
	// Sanitizing keeps the hardware: only identifiers differ.
	want := report.Sanitize()
	if diff := cmp.Diff(want, &loaded); diff != "" {
		t.Errorf("sanitized report after a JSON round trip (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(report.Topology.Links, loaded.Topology.Links); diff != "" {
		t.Errorf("links changed by sanitizing (-want,+got):\n%s", diff)
	}
	if got, want := loaded.Topology.GPUs[1].UUID, "GPU-00000000-0000-0000-0000-000000000001"; got != want {
		t.Errorf("GPU 1 UUID = %q, want %q", got, want)
	}
	if got, want := loaded.Allocations[len(loaded.Allocations)-1].DeviceIDs[0], "GPU-00000000-0000-0000-0000-000000000000"; got != want {
		t.Errorf("allocated device id = %q, want %q", got, want)
	}

	again, err := gb200Report(t).SanitizedJSON()
	if err != nil {
		t.Fatalf("SanitizedJSON: %v", err)
	}
	if diff := cmp.Diff(string(sanitized), string(again)); diff != "" {
		t.Errorf("sanitizing the same machine twice differs (-first,+second):\n%s", diff)
	}
}
