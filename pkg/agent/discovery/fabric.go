package discovery

import (
	"fmt"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// nvlinkDomain returns the multi-node NVLink domain the node's GPUs belong
// to, or nil. A node is in a domain when every queried GPU completed its
// fabric registration successfully with the same non-zero cluster UUID and
// clique id, the test GPU feature discovery's nvidia.com/gpu.clique label
// and go-nvlib's IsFabricAttached also apply. A zero cluster UUID is an
// NVSwitch system whose fabric stops at the node (HGX H100); a registration
// still in progress leaves the domain out, with a warning, until it ends.
func nvlinkDomain(gpus []*gpuFacts, w *warnings) *topology.NVLinkDomain {
	var domain *topology.NVLinkDomain
	var first *gpuFacts
	outside := 0
	for _, g := range gpus {
		if !g.queried {
			continue
		}
		d, why := fabricDomain(g)
		if why != "" {
			w.add("GPU %d: %s; the node is left out of any multi-node NVLink domain", g.gpu.Index, why)
			return nil
		}
		if d == nil {
			outside++
			continue
		}
		switch {
		case domain == nil:
			domain, first = d, g
		case d.ClusterUUID != domain.ClusterUUID || d.CliqueID != domain.CliqueID:
			w.add("GPU %d is in NVLink domain %s but GPU %d is in %s; the node is left out of any multi-node NVLink domain",
				first.gpu.Index, domain.Label(), g.gpu.Index, d.Label())
			return nil
		default:
			domain.GBps = min(domain.GBps, d.GBps)
		}
	}
	if domain != nil && outside > 0 {
		w.add("%d GPUs are in NVLink domain %s and %d are in none; the node is left out of it", countQueried(gpus)-outside, domain.Label(), outside)
		return nil
	}
	return domain
}

// fabricDomain is the domain one GPU reports: nil when it is in none, and a
// reason when its answer cannot be trusted either way.
func fabricDomain(g *gpuFacts) (*topology.NVLinkDomain, string) {
	switch {
	case g.fabricErr != nil && isNotSupported(g.fabricErr):
		return nil, ""
	case g.fabricErr != nil:
		return nil, (&QueryError{GPU: g.gpu.Index, Call: "nvmlDeviceGetGpuFabricInfoV", Err: g.fabricErr}).Error()
	}
	info := g.fabric
	switch info.State {
	case FabricStateNotSupported:
		return nil, ""
	case FabricStateCompleted:
	default:
		return nil, fmt.Sprintf("NVLink fabric registration is %v", info.State)
	}
	if info.Status != NVMLSuccess {
		return nil, fmt.Sprintf("NVLink fabric registration failed: %v", info.Status)
	}
	if info.ClusterUUID == [16]byte{} {
		return nil, ""
	}
	gbps := g.nvlink.switchGBps()
	if gbps <= 0 {
		return nil, "registered with an NVLink fabric but has no active link into NVSwitches"
	}
	return &topology.NVLinkDomain{
		ClusterUUID: formatUUID(info.ClusterUUID),
		CliqueID:    info.CliqueID,
		GBps:        gbps,
	}, ""
}

func countQueried(gpus []*gpuFacts) int {
	n := 0
	for _, g := range gpus {
		if g.queried {
			n++
		}
	}
	return n
}

// formatUUID writes a UUID in its canonical lower-case form, as GPU feature
// discovery writes the cluster UUID into the nvidia.com/gpu.clique label.
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
