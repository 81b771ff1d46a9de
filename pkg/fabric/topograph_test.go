package fabric

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTopographFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		want    *Topology
	}{
		{
			// topograph 1.0: accelerator domain in labels, the GPU clique
			// label passed through where the provider only had that.
			fixture: "topograph-instances.json",
			want: &Topology{
				Assignments: []Assignment{
					{Host: "gb200-n01", Domains: []string{"S-2c5eab036832a42e", "S-2c5eab0306555424"}, AcceleratorDomain: "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1"},
					{Host: "gb200-n02", Domains: []string{"S-2c5eab036832a42e", "S-2c5eab0306555424"}, AcceleratorDomain: "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1"},
					{Host: "gb200-n19", Domains: []string{"S-2c5eab0368a1c3f0", "S-2c5eab0306555424"}, AcceleratorDomain: "0b9e41d2-8c7a-4f13-a5e6-91d0c3b7f2aa.4"},
					{Host: "login-01"},
				},
				Depth:    2,
				Warnings: []string{"instance login-01 has no network layers"},
			},
		},
		{
			// 0.x: normalised switch names, accelerator in attributes.nvlink.
			fixture: "topograph-instances-v0.json",
			want: &Topology{
				Assignments: []Assignment{
					{Host: "gb200-b01", Domains: []string{"switch.1.1", "switch.2.1", "switch.3.1"}, AcceleratorDomain: "nvl-1"},
					{Host: "h100-a07", Domains: []string{"switch.1.2", "switch.2.1", "switch.3.1"}},
					{Host: "h100-a08", Domains: []string{"switch.1.2", "switch.2.1", "switch.3.1"}},
				},
				Depth: 3,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseTopograph(f)
			if err != nil {
				t.Fatalf("ParseTopograph: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Topology (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseTopographValues(t *testing.T) {
	long := strings.Repeat("core", 16) // 64 characters
	input := `{"instances": [
		{"id": "n1", "network_layers": ["MF0;leaf-01:MQM8700/U1", "` + long + `"], "nvlink_domain": "nvl 7"},
		{"id": "n2", "network_layers": ["leaf-2"], "labels": {"network.topology.nvidia.com/accelerator": "cb-123", "nvidia.com/gpu.clique": "ignored"}}
	]}`
	got, err := ParseTopograph(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	want := []Assignment{
		{Host: "n1", Domains: []string{labelValue("MF0;leaf-01:MQM8700/U1"), labelValue(long)}, AcceleratorDomain: labelValue("nvl 7")},
		{Host: "n2", Domains: []string{"leaf-2"}, AcceleratorDomain: "cb-123"},
	}
	if diff := cmp.Diff(want, got.Assignments); diff != "" {
		t.Errorf("Assignments (-want,+got):\n%s", diff)
	}
	for _, a := range got.Assignments {
		for _, v := range append(slices.Clone(a.Domains), a.AcceleratorDomain) {
			if !isLabelValue(v) {
				t.Errorf("host %s: %q is not a valid label value", a.Host, v)
			}
		}
	}
}

func TestParseTopographErrors(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		wantErr string
	}{
		{"empty", "", "topograph document is empty"},
		{"not an object", `["n1"]`,
			"topograph document at line 1, column 2: json: cannot unmarshal array into Go value of type fabric.topographDocument"},
		{"syntax error", "{\"instances\": [\n  {\"id\": \"n1\",}\n]}",
			"topograph document at line 2, column 16: invalid character '}' looking for beginning of object key string"},
		{"truncated", "{\"instances\": [\n  {\"id\": \"n1\"",
			"topograph document at line 2, column 14: unexpected end of input"},
		{"wrong field type", "{\"instances\": [{\"id\": \"n1\", \"network_layers\": \"leaf\"}]}",
			"topograph document at line 1, column 53: json: cannot unmarshal string into Go struct field topographInstance.instances.network_layers of type []string"},
		{"no instances", `{"topology": {}}`,
			`topograph document: no "instances" array; expected the output of topograph's graph engine`},
		{"instance without id", `{"instances": [{"network_layers": ["a"]}]}`,
			"topograph document: instance 0 has no id"},
		{"repeated id", `{"instances": [{"id": "n1"}, {"id": "n1"}]}`,
			`topograph document: instance 1 repeats id "n1" of instance 0`},
		{"empty layer", `{"instances": [{"id": "n1", "network_layers": ["leaf", ""]}]}`,
			`topograph document: instance "n1": network layer 1 is empty`},
		{"trailing data", "{\"instances\": []}\n{}",
			"topograph document at line 2, column 1: unexpected data after the top-level object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopograph(strings.NewReader(tc.input))
			if err == nil {
				t.Fatalf("ParseTopograph succeeded, want error %q", tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want,+got):\n%s", diff)
			}
		})
	}
}
