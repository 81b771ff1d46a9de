package discovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// recordAndReplay records lib, passes the recording through JSON as a
// fixture file would, and returns its replay.
func recordAndReplay(t *testing.T, lib discovery.Library, sanitize bool) discovery.Library {
	t.Helper()
	rec, err := discovery.Record(lib, "test")
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	if sanitize {
		if rec, err = rec.Sanitize(); err != nil {
			t.Fatalf("Sanitize: %v", err)
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back discovery.Recording
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back.Library()
}

// discoverWith runs discovery on lib with sysfsRoot, failing the test when
// it reports nothing.
func discoverWith(t *testing.T, lib discovery.Library, sysfsRoot string) *discovery.Report {
	t.Helper()
	r, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: sysfsRoot})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return r
}

// TestRecordingReplaysProfiles records each built-in profile's fake NVML
// and discovers the replay: the report must be the one the NVML itself
// gives, and a sanitized recording must give the sanitized report.
func TestRecordingReplaysProfiles(t *testing.T) {
	for _, p := range topology.Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			sysfs := t.TempDir()
			discover := func(lib discovery.Library) *discovery.Report { return discoverWith(t, lib, sysfs) }
			lib, _ := profileNVML(t, p.Name)
			want := discover(lib)
			if diff := cmp.Diff(want, discover(recordAndReplay(t, lib, false))); diff != "" {
				t.Errorf("replayed report (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Sanitize(), discover(recordAndReplay(t, lib, true))); diff != "" {
				t.Errorf("sanitized replay vs sanitized report (-want,+got):\n%s", diff)
			}
			if lib.Shutdowns != 3 {
				t.Errorf("NVML shut down %d times after a Discover and two Records, want 3", lib.Shutdowns)
			}
		})
	}
}

// TestRecordingReplaysFailures records GPUs whose calls fail: the replay
// must fail the same calls with the same codes, so discovery reports the
// same health and warnings.
func TestRecordingReplaysFailures(t *testing.T) {
	lib, _ := profileNVML(t, "hgx-h100")
	lib.Devices[1].Errs["UUID"] = discovery.NVMLErrorGPUIsLost
	lib.Devices[2].Errs["NVLinkState"] = discovery.NVMLErrorUnknown
	lib.Devices[3].Errs["MemoryAffinity"] = errors.New("not an NVML code")
	lib.Devices[5].HandleErr = discovery.NVMLErrorNoPermission
	// One empty sysfs for both, as its path is in a warning.
	sysfs := t.TempDir()
	discover := func(lib discovery.Library) *discovery.Report { return discoverWith(t, lib, sysfs) }
	want := discover(lib)
	if len(want.Warnings) == 0 {
		t.Fatal("the failing calls caused no warning: the test checks nothing")
	}
	if diff := cmp.Diff(want, discover(recordAndReplay(t, lib, false))); diff != "" {
		t.Errorf("replayed report (-want,+got):\n%s", diff)
	}
}

// TestRecordingMissingCall checks that a call the recording lacks fails
// with ErrNotRecorded, not with an answer made up.
func TestRecordingMissingCall(t *testing.T) {
	rec := discovery.Recording{Count: discovery.Answer{Value: json.RawMessage("1")}, Devices: []discovery.RecordedDevice{{Calls: map[string]discovery.Answer{}}}}
	d, err := rec.Library().DeviceByIndex(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.UUID(); !errors.Is(err, discovery.ErrNotRecorded) {
		t.Errorf("UUID of an empty recording = %v, want %v", err, discovery.ErrNotRecorded)
	}
	if _, err := rec.Library().DeviceByIndex(1); !errors.Is(err, discovery.NVMLErrorInvalidArgument) {
		t.Errorf("DeviceByIndex past the count = %v, want %v", err, discovery.NVMLErrorInvalidArgument)
	}
}

// TestRecordedMachines replays the NVML of real machines, recorded with
// `lockstep-topology-agent --once --sanitize --record-nvml` beside the
// report the agent printed there (testdata/nvml/<machine>.json and
// <machine>.report.json). Discovery of the replay must find the GPUs, links,
// NVLink domain and health the agent found on the machine. NICs come from
// sysfs, which is not recorded, and are not compared.
func TestRecordedMachines(t *testing.T) {
	recordings, err := filepath.Glob(filepath.Join("testdata", "nvml", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range recordings {
		if strings.HasSuffix(path, ".report.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			var rec discovery.Recording
			readJSON(t, path, &rec)
			var want discovery.Report
			readJSON(t, strings.TrimSuffix(path, ".json")+".report.json", &want)
			got := discoverWith(t, rec.Library(), t.TempDir())
			if len(want.Topology.GPUs) == 0 {
				t.Fatal("the machine's report lists no GPUs")
			}
			want.Topology.NICs = nil
			if diff := cmp.Diff(want.Topology, got.Topology); diff != "" {
				t.Errorf("topology (-machine,+replay):\n%s", diff)
			}
			if diff := cmp.Diff(want.GPUHealth, got.GPUHealth); diff != "" {
				t.Errorf("GPU health (-machine,+replay):\n%s", diff)
			}
		})
	}
	if n == 0 {
		t.Fatal("no recordings in testdata/nvml")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
