package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const fixtures = "../../pkg/fabric/testdata"

// noCluster fails the test if a dry run tries to reach the API server.
func noCluster(t *testing.T) func(string) (kubernetes.Interface, error) {
	return func(string) (kubernetes.Interface, error) {
		t.Error("dry run connected to the cluster")
		return nil, errors.New("no cluster in dry run")
	}
}

func defaultOptions() options {
	return options{levelKeys: defaultLevelKeys, acceleratorKey: defaultAcceleratorKey, dryRun: true}
}

func TestRunDryRun(t *testing.T) {
	tests := []struct {
		name string
		edit func(*options)
		want string
	}{
		{
			name: "ibnetdiscover, two tiers under three keys",
			edit: func(o *options) { o.ibnetdiscoverPath = filepath.Join(fixtures, "two-leaf.ibnetdiscover") },
			want: `node-01  fabric.topograph.run/tier-0=leaf-7cfe90030012a100 fabric.topograph.run/tier-1=spine-group-7cfe90030012a000 fabric.topograph.run/tier-2=spine-group-7cfe90030012a000
node-02  fabric.topograph.run/tier-0=leaf-7cfe90030012a100 fabric.topograph.run/tier-1=spine-group-7cfe90030012a000 fabric.topograph.run/tier-2=spine-group-7cfe90030012a000
node-03  fabric.topograph.run/tier-0=leaf-7cfe90030012a200 fabric.topograph.run/tier-1=spine-group-7cfe90030012a000 fabric.topograph.run/tier-2=spine-group-7cfe90030012a000
node-04  fabric.topograph.run/tier-0=leaf-7cfe90030012a200 fabric.topograph.run/tier-1=spine-group-7cfe90030012a000 fabric.topograph.run/tier-2=spine-group-7cfe90030012a000
`,
		},
		{
			name: "ibnetdiscover, three tiers under two custom keys, node name suffix",
			edit: func(o *options) {
				o.ibnetdiscoverPath = filepath.Join(fixtures, "three-tier.ibnetdiscover")
				o.levelKeys = []string{"example.com/leaf", "example.com/pod"}
				o.naming.suffix = ".gpu.example.com"
			},
			want: `gpu-001.gpu.example.com  example.com/leaf=leaf-a088c20300501300 example.com/pod=spine-group-a088c20300501100
gpu-002.gpu.example.com  example.com/leaf=leaf-a088c20300501400 example.com/pod=spine-group-a088c20300501100
gpu-003.gpu.example.com  example.com/leaf=leaf-a088c20300502300 example.com/pod=spine-group-a088c20300502100
gpu-004.gpu.example.com  example.com/leaf=leaf-a088c20300502400 example.com/pod=spine-group-a088c20300502100
`,
		},
		{
			name: "ibnetdiscover, hosts on no switch are left out",
			edit: func(o *options) { o.ibnetdiscoverPath = filepath.Join(fixtures, "back-to-back.ibnetdiscover") },
			want: "",
		},
		{
			name: "topograph with accelerator domains",
			edit: func(o *options) { o.topographPath = filepath.Join(fixtures, "topograph-instances.json") },
			want: `gb200-n01  fabric.topograph.run/tier-0=S-2c5eab036832a42e fabric.topograph.run/tier-1=S-2c5eab0306555424 fabric.topograph.run/tier-2=S-2c5eab0306555424 accelerator.topograph.run/domain=7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1
gb200-n02  fabric.topograph.run/tier-0=S-2c5eab036832a42e fabric.topograph.run/tier-1=S-2c5eab0306555424 fabric.topograph.run/tier-2=S-2c5eab0306555424 accelerator.topograph.run/domain=7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1
gb200-n19  fabric.topograph.run/tier-0=S-2c5eab0368a1c3f0 fabric.topograph.run/tier-1=S-2c5eab0306555424 fabric.topograph.run/tier-2=S-2c5eab0306555424 accelerator.topograph.run/domain=0b9e41d2-8c7a-4f13-a5e6-91d0c3b7f2aa.4
`,
		},
		{
			name: "topograph without the accelerator key",
			edit: func(o *options) {
				o.topographPath = filepath.Join(fixtures, "topograph-instances.json")
				o.levelKeys = []string{"example.com/leaf"}
				o.acceleratorKey = ""
			},
			want: `gb200-n01  example.com/leaf=S-2c5eab036832a42e
gb200-n02  example.com/leaf=S-2c5eab036832a42e
gb200-n19  example.com/leaf=S-2c5eab0368a1c3f0
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			opts := defaultOptions()
			tc.edit(&opts)
			var out strings.Builder
			if err := run(ctx, opts, &out, noCluster(t)); err != nil {
				t.Fatalf("run: %v", err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	twoDomains := filepath.Join(dir, "two-domains.json")
	if err := os.WriteFile(twoDomains, []byte(`{"instances": [
		{"id": "node-01.ib.example.com", "network_layers": ["leaf-a"]},
		{"id": "node-01.eth.example.com", "network_layers": ["leaf-b"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.ibnetdiscover")
	if err := os.WriteFile(broken, []byte("Switch\t4 \"S-1\"\t\t# \"leaf\"\n[9]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		edit    func(*options)
		wantErr string
	}{
		{"no input", func(o *options) {}, "give exactly one of --ibnetdiscover and --topograph"},
		{"both inputs", func(o *options) { o.ibnetdiscoverPath, o.topographPath = "a", "b" },
			"give exactly one of --ibnetdiscover and --topograph"},
		{"no level keys", func(o *options) { o.topographPath, o.levelKeys = twoDomains, nil }, "--level-keys is empty"},
		{"invalid level key", func(o *options) { o.topographPath, o.levelKeys = twoDomains, []string{"tier 1"} },
			`label key "tier 1": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		{"accelerator key among level keys", func(o *options) {
			o.topographPath, o.acceleratorKey = twoDomains, defaultLevelKeys[0]
		}, `label key "fabric.topograph.run/tier-0" is given twice across --level-keys and --accelerator-key`},
		{"two hosts on one node", func(o *options) { o.topographPath, o.naming.stripDomain = twoDomains, true },
			`hosts "node-01.eth.example.com" and "node-01.ib.example.com" both map to node "node-01"; adjust --strip-domain or --node-name-suffix`},
		{"malformed ibnetdiscover", func(o *options) { o.ibnetdiscoverPath = broken },
			broken + ": ibnetdiscover line 2: port 9 is beyond the 4 ports of S-0000000000000001"},
		{"missing file", func(o *options) { o.ibnetdiscoverPath = filepath.Join(dir, "absent") },
			"open " + filepath.Join(dir, "absent") + ": no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			opts := defaultOptions()
			tc.edit(&opts)
			err := run(ctx, opts, &strings.Builder{}, noCluster(t))
			if err == nil {
				t.Fatalf("run succeeded, want error %q", tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	tests := []struct {
		naming  nodeNaming
		host    string
		want    string
		wantErr bool
	}{
		{nodeNaming{}, "node-01", "node-01", false},
		{nodeNaming{}, "DGX-A12", "dgx-a12", false},
		{nodeNaming{stripDomain: true}, "node-01.ib.example.com", "node-01", false},
		{nodeNaming{suffix: ".cluster.local"}, "node-01", "node-01.cluster.local", false},
		{nodeNaming{stripDomain: true, suffix: ".k8s"}, "Node-01.ib", "node-01.k8s", false},
		{nodeNaming{}, "gpu_01", "", true},
	}
	for _, tc := range tests {
		got, err := tc.naming.nodeName(tc.host)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%+v.nodeName(%q) = %q, %v; want %q, error %v", tc.naming, tc.host, got, err, tc.want, tc.wantErr)
		}
	}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestRunPatchesNodes(t *testing.T) {
	const (
		tier1, tier2, tier3 = "fabric.topograph.run/tier-0", "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-2"
		leaf1, leaf2        = "leaf-7cfe90030012a100", "leaf-7cfe90030012a200"
		spines              = "spine-group-7cfe90030012a000"
	)
	client := fake.NewClientset(
		// Already labelled: left alone.
		node("node-01", map[string]string{tier1: leaf1, tier2: spines, tier3: spines, "kubernetes.io/hostname": "node-01"}),
		// Unlabelled: gains the tiers, keeps its other labels.
		node("node-02", map[string]string{"kubernetes.io/hostname": "node-02"}),
		// Stale: on another leaf before a recabling.
		node("node-03", map[string]string{tier1: leaf1, tier2: spines, tier3: spines}),
		// node-04 is not in the cluster; node-99 has no host in the fabric.
		node("node-99", map[string]string{"kubernetes.io/hostname": "node-99"}),
	)
	_, ctx := ktesting.NewTestContext(t)
	opts := defaultOptions()
	opts.dryRun = false
	opts.ibnetdiscoverPath = filepath.Join(fixtures, "two-leaf.ibnetdiscover")
	connect := func(string) (kubernetes.Interface, error) { return client, nil }
	if err := run(ctx, opts, &strings.Builder{}, connect); err != nil {
		t.Fatalf("run: %v", err)
	}

	want := map[string]map[string]string{
		"node-01": {tier1: leaf1, tier2: spines, tier3: spines, "kubernetes.io/hostname": "node-01"},
		"node-02": {tier1: leaf1, tier2: spines, tier3: spines, "kubernetes.io/hostname": "node-02"},
		"node-03": {tier1: leaf2, tier2: spines, tier3: spines},
		"node-99": {"kubernetes.io/hostname": "node-99"},
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]map[string]string)
	for _, n := range nodes.Items {
		got[n.Name] = n.Labels
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node labels (-want,+got):\n%s", diff)
	}

	var patched []string
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patched = append(patched, p.GetName())
		}
	}
	if diff := cmp.Diff([]string{"node-02", "node-03"}, patched); diff != "" {
		t.Errorf("patched nodes (-want,+got):\n%s", diff)
	}
}

func TestRunReportsFailedPatches(t *testing.T) {
	client := fake.NewClientset(node("node-01", nil), node("node-02", nil), node("node-03", nil), node("node-04", nil))
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "node-02" {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	_, ctx := ktesting.NewTestContext(t)
	opts := defaultOptions()
	opts.dryRun = false
	opts.ibnetdiscoverPath = filepath.Join(fixtures, "two-leaf.ibnetdiscover")
	err := run(ctx, opts, &strings.Builder{}, func(string) (kubernetes.Interface, error) { return client, nil })
	want := "patching 1 of 4 nodes failed: node node-02: etcdserver: request timed out"
	if err == nil || err.Error() != want {
		t.Fatalf("run error = %v, want %q", err, want)
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "node-03", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["fabric.topograph.run/tier-0"] == "" {
		t.Errorf("node-03 after a failure on node-02 has labels %v; want the others patched anyway", n.Labels)
	}
}

func TestSplitList(t *testing.T) {
	got := splitList(" a/b, ,c ,")
	if diff := cmp.Diff([]string{"a/b", "c"}, got); diff != "" {
		t.Errorf("splitList (-want,+got):\n%s", diff)
	}
}
