package fabric

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Label keys under which topograph's instance document carries the
// accelerator (multi-node NVLink) domain, most recent first: topograph 1.0,
// the 0.x releases, and GPU feature discovery's clique label that topograph
// passes through.
var topographAcceleratorKeys = []string{
	lockstep.LabelAcceleratorDomain,
	"network.topology.nvidia.com/accelerator",
	lockstep.LabelGPUClique,
}

// topographDocument is the JSON that topograph's graph engine returns from
// /v1/topology or writes to its topologyConfigPath.
type topographDocument struct {
	Instances *[]topographInstance `json:"instances"`
}

// topographInstance is one instance of the document. Releases have changed
// how the accelerator domain travels (labels, attributes.nvlink,
// nvlink_domain); all are read. Unknown fields are ignored.
type topographInstance struct {
	ID string `json:"id"`
	// NetworkLayers are switch IDs (or topograph's normalised names), closest
	// to the instance first.
	NetworkLayers []string          `json:"network_layers"`
	Labels        map[string]string `json:"labels"`
	Attributes    struct {
		NVLink string `json:"nvlink"`
	} `json:"attributes"`
	NVLinkDomain string `json:"nvlink_domain"`
}

// ParseTopograph reads the instance document of NVIDIA topograph's graph
// engine,
//
//	{"instances": [{"id": "node-01", "network_layers": ["leaf-a", "spine-a"], "labels": {...}}]}
//
// and returns one Assignment per instance: the instance id is the host, the
// network layers (closest first) are its Domains, and the accelerator domain
// comes from the labels or the older attributes.nvlink / nvlink_domain
// fields. Values that are not valid label values are replaced by "x" and
// their FNV-64a hash, which is what topograph writes for values over 63
// characters.
//
// Malformed JSON returns an error naming the line and column.
func ParseTopograph(r io.Reader) (*Topology, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading topograph document: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var doc topographDocument
	if err := dec.Decode(&doc); err != nil {
		return nil, topographJSONError(data, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		for end < int64(len(data)) && strings.ContainsRune(" \t\r\n", rune(data[end])) {
			end++
		}
		return nil, fmt.Errorf("topograph document at %s: unexpected data after the top-level object", position(data, end))
	}
	if doc.Instances == nil {
		return nil, errors.New(`topograph document: no "instances" array; expected the output of topograph's graph engine`)
	}

	topo := &Topology{}
	seen := make(map[string]int)
	for i, inst := range *doc.Instances {
		if inst.ID == "" {
			return nil, fmt.Errorf("topograph document: instance %d has no id", i)
		}
		if prev, dup := seen[inst.ID]; dup {
			return nil, fmt.Errorf("topograph document: instance %d repeats id %q of instance %d", i, inst.ID, prev)
		}
		seen[inst.ID] = i
		a := Assignment{Host: inst.ID}
		for level, layer := range inst.NetworkLayers {
			if layer == "" {
				return nil, fmt.Errorf("topograph document: instance %q: network layer %d is empty", inst.ID, level)
			}
			a.Domains = append(a.Domains, labelValue(layer))
		}
		if domain := inst.acceleratorDomain(); domain != "" {
			a.AcceleratorDomain = labelValue(domain)
		}
		if len(a.Domains) == 0 {
			topo.Warnings = append(topo.Warnings, fmt.Sprintf("instance %s has no network layers", inst.ID))
		}
		topo.Depth = max(topo.Depth, len(a.Domains))
		topo.Assignments = append(topo.Assignments, a)
	}
	sortAssignments(topo.Assignments)
	return topo, nil
}

func (inst *topographInstance) acceleratorDomain() string {
	for _, key := range topographAcceleratorKeys {
		if v := inst.Labels[key]; v != "" {
			return v
		}
	}
	if inst.Attributes.NVLink != "" {
		return inst.Attributes.NVLink
	}
	return inst.NVLinkDomain
}

// topographJSONError adds the line and column to a decoding error.
func topographJSONError(data []byte, err error) error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("topograph document at %s: %w", position(data, syntaxErr.Offset), err)
	case errors.As(err, &typeErr):
		return fmt.Errorf("topograph document at %s: %w", position(data, typeErr.Offset), err)
	case errors.Is(err, io.EOF):
		return errors.New("topograph document is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("topograph document at %s: unexpected end of input", position(data, int64(len(data))))
	}
	return fmt.Errorf("topograph document: %w", err)
}

// position renders a byte offset as "line L, column C" (1-based).
func position(data []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}
