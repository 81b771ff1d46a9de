package discovery

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Backend reads one node's hardware. The agent is written against it; the
// two implementations sit side by side: NVMLBackend on a GPU node, and
// ProfileBackend, which simulates a node of a built-in hardware profile for
// the fake agent and tests.
type Backend interface {
	// Discover returns the node's report. An error means there is nothing
	// to report (see Discover); partial failures are in Report.Warnings.
	Discover(ctx context.Context) (*Report, error)
}

var (
	_ Backend = NVMLBackend{}
	_ Backend = ProfileBackend{}
)

// NVMLBackend discovers the node it runs on: NVML, sysfs and the kubelet's
// pod-resources API, as Options say.
type NVMLBackend struct {
	Options Options
}

// Discover runs Discover with the backend's options.
func (b NVMLBackend) Discover(ctx context.Context) (*Report, error) {
	return Discover(ctx, b.Options)
}

// ProfileBackend simulates a node of a built-in hardware profile. Its GPUs
// get UUIDs derived from NodeName, and a profile with a multi-node NVLink
// domain is placed in the clique Clique names ("<cluster UUID>.<clique id>",
// as GPU feature discovery labels it); without one the node is a domain of
// its own. It reports no HCAs and no allocations: the fake agent keeps
// allocations itself.
type ProfileBackend struct {
	Profile  topology.Profile
	NodeName string
	Clique   string
}

// Discover returns the profile's hardware.
func (b ProfileBackend) Discover(context.Context) (*Report, error) {
	hw, err := b.Profile.Node()
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", b.Profile.Name, err)
	}
	for i := range hw.GPUs {
		hw.GPUs[i].UUID = fmt.Sprintf("GPU-fake-%s-%d", b.NodeName, i)
	}
	if hw.NVLinkDomain != nil {
		clique := b.Clique
		if clique == "" {
			clique = "standalone-" + b.NodeName
		}
		hw.NVLinkDomain.ClusterUUID, hw.NVLinkDomain.CliqueID = parseClique(clique)
	}
	health := make([]GPUHealth, len(hw.GPUs))
	for i := range health {
		health[i] = GPUHealth{Index: i, UUID: hw.GPUs[i].UUID, State: GPUHealthy}
	}
	return &Report{Topology: *hw, GPUHealth: health}, nil
}

// parseClique splits GPU feature discovery's "<cluster UUID>.<clique id>";
// a value without a numeric clique id is all cluster UUID, clique 0.
func parseClique(v string) (string, uint32) {
	if i := strings.LastIndexByte(v, '.'); i > 0 {
		if id, err := strconv.ParseUint(v[i+1:], 10, 32); err == nil {
			return v[:i], uint32(id)
		}
	}
	return v, 0
}
