package discovery_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// TestDiscoveredUUIDsJoinDRADevices checks that the real agent reports the
// NVML UUID of every GPU that answers, so the devices NVIDIA's DRA driver
// publishes (gpu-<minor> with the same NVML UUID) join the node's
// NodeTopology GPUs; a GPU lost before its UUID was read joins nothing and
// shows as unpublished rather than as another GPU's.
func TestDiscoveredUUIDsJoinDRADevices(t *testing.T) {
	for _, name := range topology.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			lib, node := profileNVML(t, name)
			lost := len(node.GPUs) - 1
			lib.Devices[lost].Errs["UUID"] = discovery.NVMLErrorGPUIsLost
			report, err := discovery.Discover(context.Background(), discovery.Options{NVML: lib, SysfsRoot: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			// The driver's devices, named by minor number, which the fake
			// NVML numbers in reverse so names and indexes differ.
			var devices []topology.DRADevice
			for i, g := range node.GPUs {
				devices = append(devices, topology.DRADevice{
					Driver: lockstep.DRAGPUDriver, Name: fmt.Sprintf("gpu-%d", len(node.GPUs)-1-i), UUID: g.UUID,
				})
			}
			join := topology.JoinDRADevices(&report.Topology, lockstep.DRAGPUDriver, devices[:lost])
			if len(join.Unjoined) != 0 || len(join.GPUs) != lost {
				t.Errorf("joined %d of %d answering GPUs' devices; unjoined %v", len(join.GPUs), lost, join.Unjoined)
			}
			for i := range lost {
				if got := join.GPUs[devices[i].Name]; got != i {
					t.Errorf("device %s joined GPU %d, want %d (its UUID's)", devices[i].Name, got, i)
				}
			}
			if len(join.Unpublished) != 1 || join.Unpublished[0] != lost {
				t.Errorf("unpublished GPUs %v, want only the lost GPU %d", join.Unpublished, lost)
			}
		})
	}
}
