package clustermodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

const validModel = `
apiVersion: lockstep.dev/v1alpha1
kind: ClusterModel
name: small
levels:
  - name: leaf
    nodeLabel: fabric.topograph.run/tier-0
  - name: spine
    nodeLabel: fabric.topograph.run/tier-1
    oversubscription: 2
pools:
  - name: h100
    profile: hgx-h100
    nodes: 6
    nodesPerDomain: {leaf: 2, spine: 4}
`

func TestParseRejectsBadModels(t *testing.T) {
	tests := []struct {
		name string
		// edit turns the valid model into the bad one.
		edit func(string) string
		// wantErrs must all appear in the error text.
		wantErrs []string
	}{
		{
			name:     "unknown profile",
			edit:     replace("profile: hgx-h100", "profile: hgx-h200"),
			wantErrs: []string{`pools[0].profile: Unsupported value: "hgx-h200"`, `"hgx-h100"`},
		},
		{
			name:     "missing profile",
			edit:     replace("profile: hgx-h100", ""),
			wantErrs: []string{"pools[0].profile: Required value: set one of: a100-pcie-nvlink, dgx1-v100"},
		},
		{
			name:     "negative count",
			edit:     replace("nodes: 6", "nodes: -3"),
			wantErrs: []string{"pools[0].nodes: Invalid value: -3: must be at least 1"},
		},
		{
			name: "duplicate pool names give duplicate node names",
			edit: func(s string) string {
				return s + "  - name: h100\n    profile: l40s-pcie\n    nodes: 2\n    nodesPerDomain: {leaf: 2, spine: 2}\n"
			},
			wantErrs: []string{"pools[1].name: Duplicate value: \"h100 (also pools[0]); pools with one name give duplicate node names, rename one\""},
		},
		{
			name:     "level without a label key",
			edit:     replace("    nodeLabel: fabric.topograph.run/tier-1\n", ""),
			wantErrs: []string{"levels[1].nodeLabel: Required value: set the node label key"},
		},
		{
			name:     "invalid label key",
			edit:     replace("fabric.topograph.run/tier-1", "fabric topograph/tier 2"),
			wantErrs: []string{`levels[1].nodeLabel: Invalid value: "fabric topograph/tier 2": must be a label key`},
		},
		{
			name:     "typo in a field name",
			edit:     replace("nodes: 6", "nodse: 6"),
			wantErrs: []string{`unknown field "pools[0].nodse": check its spelling against docs/cluster-model.md`},
		},
		{
			name:     "wrong type",
			edit:     replace("nodes: 6", "nodes: six"),
			wantErrs: []string{"pools.nodes: expected a int, got a string"},
		},
		{
			name:     "broken YAML",
			edit:     replace("  - name: leaf\n", "  - name: leaf\n  nodeLabel: [\n"),
			wantErrs: []string{"not valid YAML"},
		},
		{
			name:     "domains that do not nest",
			edit:     replace("{leaf: 2, spine: 4}", "{leaf: 3, spine: 4}"),
			wantErrs: []string{"pools[0].nodesPerDomain[spine]: Invalid value: 4: must be a multiple of the leaf size 3 so domains nest"},
		},
		{
			name:     "required level missing from a pool",
			edit:     replace("{leaf: 2, spine: 4}", "{leaf: 2}"),
			wantErrs: []string{"pools[0].nodesPerDomain[spine]: Required value: give the number of this pool's nodes in one spine domain"},
		},
		{
			name:     "pool names a level that does not exist",
			edit:     replace("{leaf: 2, spine: 4}", "{leaf: 2, spine: 4, rack: 1}"),
			wantErrs: []string{`pools[0].nodesPerDomain[rack]: Unsupported value: "rack": supported values: "leaf", "spine"`},
		},
		{
			name:     "oversubscription below one",
			edit:     replace("oversubscription: 2", "oversubscription: 0.5"),
			wantErrs: []string{"levels[1].oversubscription: Invalid value: 0.5: must be at least 1"},
		},
		{
			name:     "duplicate level names",
			edit:     replace("name: spine", "name: leaf"),
			wantErrs: []string{`levels[1].name: Duplicate value: "leaf (also levels[0]); give each level its own name"`},
		},
		{
			name:     "unknown GPU driver",
			edit:     replace("nodes: 6", "nodes: 6\n    gpuDriver: dra"),
			wantErrs: []string{`pools[0].gpuDriver: Unsupported value: "dra": supported values: "DevicePlugin", "DRA"`},
		},
		{
			name:     "wrong kind",
			edit:     replace("kind: ClusterModel", "kind: Cluster"),
			wantErrs: []string{`kind: Invalid value: "Cluster": set kind: ClusterModel`},
		},
		{
			name:     "empty file",
			edit:     func(string) string { return "" },
			wantErrs: []string{"file is empty"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.edit(validModel)))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(validModel, "nodes: 6", "nodes: 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "cluster model "+path+": invalid model:\n  pools[0].nodes") {
		t.Fatalf("Load error = %v, want it to name %s and the field", err, path)
	}
}

func TestNodes(t *testing.T) {
	m, err := Parse([]byte(validModel))
	if err != nil {
		t.Fatal(err)
	}
	nodes := m.Nodes()
	type placed struct{ Name, Leaf, Spine string }
	var got []placed
	for _, n := range nodes {
		got = append(got, placed{n.Name, n.Labels["fabric.topograph.run/tier-0"], n.Labels["fabric.topograph.run/tier-1"]})
	}
	want := []placed{
		{"h100-0", "leaf-0", "spine-0"},
		{"h100-1", "leaf-0", "spine-0"},
		{"h100-2", "leaf-1", "spine-0"},
		{"h100-3", "leaf-1", "spine-0"},
		{"h100-4", "leaf-2", "spine-1"},
		{"h100-5", "leaf-2", "spine-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node placement (-want,+got):\n%s", diff)
	}
	n := nodes[0]
	if got := n.Status.Allocatable[lockstep.GPUResource]; got.Value() != 8 {
		t.Errorf("allocatable %s = %s, want 8", lockstep.GPUResource, got.String())
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		if q, ok := n.Status.Capacity[r]; !ok || q.IsZero() {
			t.Errorf("capacity %s missing", r)
		}
	}
	if n.Annotations[KWOKNodeAnnotation] != "fake" {
		t.Errorf("node lacks the KWOK annotation: %v", n.Annotations)
	}
	if n.Labels[lockstep.LabelProfile] != "hgx-h100" || n.Labels[lockstep.LabelNVIDIAGPUProduct] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("profile labels = %v", n.Labels)
	}
}

func TestNodesSharedAndOptionalDomains(t *testing.T) {
	m, err := Parse([]byte(`
apiVersion: lockstep.dev/v1alpha1
kind: ClusterModel
levels:
  - {name: clique, nodeLabel: nvidia.com/gpu.clique, optional: true}
  - {name: leaf, nodeLabel: tier-1}
  - {name: spine, nodeLabel: tier-2}
pools:
  - {name: a, profile: hgx-h100, nodes: 2, nodesPerDomain: {leaf: 2, spine: 4}}
  - {name: b, profile: gb200-nvl72, nodes: 2, nodesPerDomain: {clique: 2, leaf: 2, spine: 2}, firstDomain: {spine: 0}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, n := range m.Nodes() {
		got[n.Name] = map[string]string{
			"clique": n.Labels["nvidia.com/gpu.clique"], "leaf": n.Labels["tier-1"], "spine": n.Labels["tier-2"],
		}
	}
	want := map[string]map[string]string{
		"a-0": {"clique": "", "leaf": "leaf-0", "spine": "spine-0"},
		"a-1": {"clique": "", "leaf": "leaf-0", "spine": "spine-0"},
		"b-0": {"clique": "clique-0", "leaf": "leaf-1", "spine": "spine-0"},
		"b-1": {"clique": "clique-0", "leaf": "leaf-1", "spine": "spine-0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("domains (-want,+got):\n%s", diff)
	}
}

func TestShippedModels(t *testing.T) {
	tests := []struct {
		file  string
		nodes int
		gpus  int64
	}{
		{"hgx-32.yaml", 32, 256},
		{"scale-5000.yaml", 5000, 4424*8 + 576*4},
		// Only the H100 pool's 32 GPUs are nvidia.com/gpu; the DGX-1 and
		// GB200 pools' are DRA devices.
		{"mixed-dra.yaml", 26, 4 * 8},
		{"gb200-100k.yaml", 25200, 25200 * 4},
		{"gb200-14.yaml", 14, 12*4 + 2*8},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			m, err := Load(filepath.Join("..", "..", "test", "e2e", "models", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			nodes := m.Nodes()
			var gpus int64
			names := map[string]bool{}
			for _, n := range nodes {
				q := n.Status.Allocatable[lockstep.GPUResource]
				gpus += q.Value()
				if names[n.Name] {
					t.Errorf("duplicate node %s", n.Name)
				}
				names[n.Name] = true
				for _, l := range m.Levels {
					if _, ok := n.Labels[l.NodeLabel]; !ok && !l.Optional {
						t.Errorf("node %s lacks level %s", n.Name, l.Name)
					}
				}
			}
			if len(nodes) != tc.nodes || gpus != tc.gpus {
				t.Errorf("%d nodes with %d GPUs, want %d with %d", len(nodes), gpus, tc.nodes, tc.gpus)
			}
		})
	}
}

func replace(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic("test edit does not apply: " + old)
		}
		return strings.Replace(s, old, new, 1)
	}
}

func TestNodesGPUDriver(t *testing.T) {
	m, err := Parse([]byte(validModel + `  - name: dgx1
    profile: dgx1-v100
    gpuDriver: DRA
    nodes: 2
    nodesPerDomain: {leaf: 2, spine: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	type gpuNode struct {
		Allocatable  int64
		HasResource  bool
		DriverLabel  string
		DevicePlugin string
	}
	got := map[string]gpuNode{}
	for _, n := range m.Nodes() {
		q, ok := n.Status.Allocatable[lockstep.GPUResource]
		_, inCapacity := n.Status.Capacity[lockstep.GPUResource]
		if ok != inCapacity {
			t.Errorf("node %s: %s in allocatable %v, in capacity %v", n.Name, lockstep.GPUResource, ok, inCapacity)
		}
		got[n.Name] = gpuNode{q.Value(), ok, n.Labels[lockstep.LabelGPUDriver], n.Labels[lockstep.LabelNVIDIADeployDevicePlugin]}
	}
	plugin := gpuNode{Allocatable: 8, HasResource: true}
	dra := gpuNode{DriverLabel: "DRA", DevicePlugin: "false"}
	want := map[string]gpuNode{
		"h100-0": plugin, "h100-1": plugin, "h100-2": plugin, "h100-3": plugin, "h100-4": plugin, "h100-5": plugin,
		"dgx1-0": dra, "dgx1-1": dra,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU resources and labels per node (-want,+got):\n%s", diff)
	}
	if got := []string{m.Pools[0].GPUDriver, m.Pools[1].GPUDriver}; !cmp.Equal(got, []string{"DevicePlugin", "DRA"}) {
		t.Errorf("pool GPU drivers after defaulting = %v, want [DevicePlugin DRA]", got)
	}
}

func TestWithGPUDriver(t *testing.T) {
	mixed, err := Load(filepath.Join("..", "..", "test", "e2e", "models", "mixed-dra.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	small, err := Parse([]byte(validModel))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		model  *Model
		driver string
	}{
		{"device-plugin model to DRA", small, lockstep.GPUDriverDRA},
		{"mixed model to DRA", mixed, lockstep.GPUDriverDRA},
		{"mixed model to the device plugin", mixed, lockstep.GPUDriverDevicePlugin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, err := tc.model.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			// A copy edited must leave the model it was made from alone.
			scratch := tc.model.WithGPUDriver(tc.driver)
			for i := range scratch.Pools {
				for k := range scratch.Pools[i].NodesPerDomain {
					scratch.Pools[i].NodesPerDomain[k]++
				}
				for k := range scratch.Pools[i].FirstDomain {
					scratch.Pools[i].FirstDomain[k]++
				}
			}
			scratch.Levels[0].Name = "edited"
			after, err := tc.model.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(before), string(after)); diff != "" {
				t.Errorf("WithGPUDriver changed the model it copied (-before,+after):\n%s", diff)
			}

			data, err := tc.model.WithGPUDriver(tc.driver).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			reread, err := Parse(data)
			if err != nil {
				t.Fatalf("the converted model does not parse: %v\n%s", err, data)
			}
			want := *tc.model
			want.Pools = nil
			for _, p := range tc.model.Pools {
				p.GPUDriver = tc.driver
				want.Pools = append(want.Pools, p)
			}
			if diff := cmp.Diff(&want, reread); diff != "" {
				t.Errorf("converted model, written and read back (-want,+got):\n%s", diff)
			}

			// The same nodes in the same domains; only how the GPUs are
			// advertised differs.
			wantNodes, gotNodes := tc.model.Nodes(), reread.Nodes()
			if len(gotNodes) != len(wantNodes) {
				t.Fatalf("%d nodes, want %d", len(gotNodes), len(wantNodes))
			}
			for i, n := range gotNodes {
				if n.Name != wantNodes[i].Name {
					t.Errorf("node %d is %s, want %s", i, n.Name, wantNodes[i].Name)
				}
				for _, l := range tc.model.Levels {
					if n.Labels[l.NodeLabel] != wantNodes[i].Labels[l.NodeLabel] {
						t.Errorf("node %s: %s=%q, want %q", n.Name, l.NodeLabel, n.Labels[l.NodeLabel], wantNodes[i].Labels[l.NodeLabel])
					}
				}
				_, advertised := n.Status.Capacity[lockstep.GPUResource]
				if wantAdvertised := tc.driver == lockstep.GPUDriverDevicePlugin; advertised != wantAdvertised {
					t.Errorf("node %s advertises %s: %t, want %t", n.Name, lockstep.GPUResource, advertised, wantAdvertised)
				}
			}
		})
	}
}
