package discovery

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Sanitize returns a deep copy of the report with what identifies the
// machine or its users replaced by stable placeholders, so a real node's
// discovery can be committed as a test fixture: GPU UUIDs become
// GPU-00000000-0000-0000-0000-<index>, the NVLink cluster UUID a fixed
// non-zero UUID, HCA node GUIDs 0000:0000:0000:<n>, and pod namespaces and
// names ns-<n> and pod-<n>. The same replacements are made inside health
// reasons, warnings and device ids. PCI addresses, products and link
// facts, the hardware itself, are kept.
func (r *Report) Sanitize() *Report {
	var pairs []string
	out := &Report{Topology: cloneTopology(r.Topology)}
	for i := range out.Topology.GPUs {
		g := &out.Topology.GPUs[i]
		if g.UUID != "" {
			placeholder := fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", g.Index)
			pairs = append(pairs, g.UUID, placeholder)
			g.UUID = placeholder
		}
	}
	if d := out.Topology.NVLinkDomain; d != nil {
		placeholder := "00000000-0000-0000-0000-000000000001"
		pairs = append(pairs, d.ClusterUUID, placeholder)
		d.ClusterUUID = placeholder
	}
	for i, h := range r.HCAs {
		h.Ports = append([]HCAPort(nil), h.Ports...)
		if h.NodeGUID != "" {
			placeholder := fmt.Sprintf("0000:0000:0000:%04x", i)
			pairs = append(pairs, h.NodeGUID, placeholder)
			h.NodeGUID = placeholder
		}
		out.HCAs = append(out.HCAs, h)
	}
	namespaces, pods := map[string]string{}, map[string]string{}
	for _, a := range r.Allocations {
		if _, ok := namespaces[a.Namespace]; !ok {
			namespaces[a.Namespace] = fmt.Sprintf("ns-%d", len(namespaces))
		}
		key := a.Namespace + "/" + a.Pod
		if _, ok := pods[key]; !ok {
			pods[key] = fmt.Sprintf("pod-%d", len(pods))
		}
	}
	// Containers the kubelet listed without devices name pods too; in
	// order, so that a report sanitizes the same way every time.
	for _, key := range slices.Sorted(maps.Keys(r.DynamicResources)) {
		parts := strings.SplitN(key, "/", 3)
		if len(parts) != 3 {
			continue
		}
		if _, ok := namespaces[parts[0]]; !ok {
			namespaces[parts[0]] = fmt.Sprintf("ns-%d", len(namespaces))
		}
		if _, ok := pods[parts[0]+"/"+parts[1]]; !ok {
			pods[parts[0]+"/"+parts[1]] = fmt.Sprintf("pod-%d", len(pods))
		}
	}
	claims := map[string]string{}
	replace := strings.NewReplacer(pairs...)
	for _, a := range r.Allocations {
		s := Allocation{
			Namespace: namespaces[a.Namespace],
			Pod:       pods[a.Namespace+"/"+a.Pod],
			Container: a.Container,
			GPUs:      append([]int(nil), a.GPUs...),
		}
		for _, id := range a.DeviceIDs {
			s.DeviceIDs = append(s.DeviceIDs, replace.Replace(id))
		}
		for _, d := range a.ClaimDevices {
			if _, ok := claims[d.Claim]; !ok {
				claims[d.Claim] = fmt.Sprintf("%s/claim-%d", namespaces[a.Namespace], len(claims))
			}
			// Pools are node names, which the report does not keep.
			s.ClaimDevices = append(s.ClaimDevices, ClaimDevice{Claim: claims[d.Claim], Pool: "node", Device: d.Device})
		}
		out.Allocations = append(out.Allocations, s)
	}
	if r.DynamicResources != nil {
		out.DynamicResources = make(map[string]bool, len(r.DynamicResources))
		for key, listed := range r.DynamicResources {
			parts := strings.SplitN(key, "/", 3)
			if len(parts) != 3 {
				continue
			}
			out.DynamicResources[namespaces[parts[0]]+"/"+pods[parts[0]+"/"+parts[1]]+"/"+parts[2]] = listed
		}
	}
	for _, h := range r.GPUHealth {
		h.UUID = replace.Replace(h.UUID)
		h.Reason = replace.Replace(h.Reason)
		out.GPUHealth = append(out.GPUHealth, h)
	}
	for _, w := range r.Warnings {
		out.Warnings = append(out.Warnings, replace.Replace(w))
	}
	return out
}

// SanitizedJSON is the sanitized report as indented JSON, ready to save as
// a fixture.
func (r *Report) SanitizedJSON() ([]byte, error) {
	b, err := json.MarshalIndent(r.Sanitize(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding discovery report: %w", err)
	}
	return b, nil
}

// cloneTopology deep-copies a node topology.
func cloneTopology(n topology.NodeTopology) topology.NodeTopology {
	out := topology.NodeTopology{GPUs: append([]topology.GPU(nil), n.GPUs...)}
	for _, row := range n.Links {
		out.Links = append(out.Links, append([]topology.Link(nil), row...))
	}
	for _, nic := range n.NICs {
		nic.NearestGPUs = append([]int(nil), nic.NearestGPUs...)
		nic.GPUPaths = append([]topology.LinkClass(nil), nic.GPUPaths...)
		out.NICs = append(out.NICs, nic)
	}
	if n.NVLinkDomain != nil {
		d := *n.NVLinkDomain
		out.NVLinkDomain = &d
	}
	return out
}
