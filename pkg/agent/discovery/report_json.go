package discovery

import (
	"encoding/json"
	"fmt"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// reportJSON is the JSON form of a Report. The topology is written as the
// NodeTopology API's spec, the form the agent publishes and operators read:
// one entry per GPU pair, link classes by name, bandwidths in MB/s.
type reportJSON struct {
	Topology    v1alpha1.NodeTopologySpec `json:"topology"`
	GPUHealth   []GPUHealth               `json:"gpuHealth"`
	HCAs        []HCA                     `json:"hcas,omitempty"`
	Allocations []Allocation              `json:"allocations,omitempty"`
	// DynamicResources is omitted when empty, as when not asked.
	DynamicResources map[string]bool `json:"dynamicResources,omitempty"`
	Warnings         []string        `json:"warnings,omitempty"`
	Unavailable      []Source        `json:"unavailable,omitempty"`
}

// MarshalJSON writes the report with its topology in API form.
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(reportJSON{
		Topology:         v1alpha1.SpecFromTopology(&r.Topology, ""),
		GPUHealth:        r.GPUHealth,
		HCAs:             r.HCAs,
		Allocations:      r.Allocations,
		DynamicResources: r.DynamicResources,
		Warnings:         r.Warnings,
		Unavailable:      r.Unavailable,
	})
}

// UnmarshalJSON reads a report written by MarshalJSON, such as a saved
// fixture, and validates its topology.
func (r *Report) UnmarshalJSON(b []byte) error {
	var in reportJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	node, err := in.Topology.ToTopology()
	if err != nil {
		return fmt.Errorf("report topology: %w", err)
	}
	*r = Report{Topology: *node, GPUHealth: in.GPUHealth, HCAs: in.HCAs, Allocations: in.Allocations, DynamicResources: in.DynamicResources, Warnings: in.Warnings, Unavailable: in.Unavailable}
	return nil
}
