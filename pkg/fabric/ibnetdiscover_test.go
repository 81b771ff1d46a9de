package fabric

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parseFixture(t testing.TB, name string) *Fabric {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fab, err := ParseIBNetDiscover(f)
	if err != nil {
		t.Fatalf("ParseIBNetDiscover(%s): %v", name, err)
	}
	return fab
}

func TestParseIBNetDiscoverFixture(t *testing.T) {
	fab := parseFixture(t, "two-leaf.ibnetdiscover")
	if got, want := len(fab.Nodes()), 3+8; got != want {
		t.Errorf("len(Nodes()) = %d, want %d", got, want)
	}
	wantLeaf := &Node{
		Type: NodeSwitch, GUID: "7cfe90030012a200", Description: "MF0;ib-leaf-02:MSB7800/U1", Ports: 36, Line: 33,
		Links: []Link{
			{Port: 1, Peer: "98039b0300c10300", PeerType: NodeCA, PeerPort: 1, Width: "4x", Speed: "EDR", Line: 34},
			{Port: 2, Peer: "98039b0300c10310", PeerType: NodeCA, PeerPort: 1, Width: "4x", Speed: "EDR", Line: 35},
			{Port: 3, Peer: "98039b0300c10400", PeerType: NodeCA, PeerPort: 1, Width: "4x", Speed: "EDR", Line: 36},
			{Port: 19, Peer: "7cfe90030012a000", PeerType: NodeSwitch, PeerPort: 3, Width: "4x", Speed: "EDR", Line: 37},
			{Port: 20, Peer: "7cfe90030012a000", PeerType: NodeSwitch, PeerPort: 4, Width: "4x", Speed: "EDR", Line: 38},
		},
	}
	if diff := cmp.Diff(wantLeaf, fab.Node("7cfe90030012a200")); diff != "" {
		t.Errorf("leaf node (-want,+got):\n%s", diff)
	}
	wantCA := &Node{
		Type: NodeCA, GUID: "98039b0300c10410", Description: "node-04 mlx5_1", Ports: 1, Line: 51,
		Links: []Link{{Port: 1, Peer: "7cfe90030012a100", PeerType: NodeSwitch, PeerPort: 5, Width: "4x", Speed: "EDR", Line: 52}},
	}
	if diff := cmp.Diff(wantCA, fab.Node("98039b0300c10410")); diff != "" {
		t.Errorf("adapter node (-want,+got):\n%s", diff)
	}
}

// TestParseIBNetDiscoverVariants covers output shapes other than the plain
// topology: -g grouping, -f full information, CRLF line ends, nodes known
// only from a peer's line, routers, unknown widths and speeds.
func TestParseIBNetDiscoverVariants(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  map[string]*Node
	}{
		{
			name: "grouping, full information and a captured warning",
			input: "\nChassis 1 (guid 0x2c90000f1e2d3)\n\n# Spine Nodes\n" +
				"vendid=0x2c9\ndevid=0xbd36\nsysimgguid=0x2c90000f1e2d3\t\t# Chassis 1 (ISR9288)\n" +
				"switchguid=0x2c90000f1e2d0(2c90000f1e2d0)\t# ISR9288 Spine 1 Chip 1\n" +
				"Switch\t24 \"S-0002c90000f1e2d0\"\t\t# \"ISR9288/ISR9096 Voltaire sLB-24D\" base port 0 lid 7 lmc 0\n" +
				"[1][ext 1]\t\"H-0002c90300a1b2c0\"[1](2c90300a1b2c1) \t\t# \"cn001 HCA-1\" lid 12 4xQDR s=4 w=2 v=4\n" +
				"\nNon-Chassis Nodes\n\nHostname: cn001\n" +
				"ibwarn: [4321] _do_madrpc: recv failed: Connection timed out\n",
			want: map[string]*Node{
				"0002c90000f1e2d0": {Type: NodeSwitch, GUID: "0002c90000f1e2d0", Description: "ISR9288/ISR9096 Voltaire sLB-24D", Ports: 24, Line: 9,
					Links: []Link{{Port: 1, Peer: "0002c90300a1b2c0", PeerType: NodeCA, PeerPort: 1, Width: "4x", Speed: "QDR", Line: 10}}},
				"0002c90300a1b2c0": {Type: NodeCA, GUID: "0002c90300a1b2c0", Description: "cn001 HCA-1"},
			},
		},
		{
			name: "CRLF, router, unknown speed, quotes inside a description",
			input: "vendid=0x2c9\r\ncaguid=0xa\r\nCa\t2 \"H-000000000000000a\"\t\t# \"gw \"east\" HCA-1\"\r\n" +
				"[2](b) \t\"R-000000000000000c\"[1] (c) \t\t# lid 3 lmc 0 \"router-1\" lid 4 4x???\r\n",
			want: map[string]*Node{
				"000000000000000a": {Type: NodeCA, GUID: "000000000000000a", Description: `gw "east" HCA-1`, Ports: 2, Line: 3,
					Links: []Link{{Port: 2, Peer: "000000000000000c", PeerType: NodeRouter, PeerPort: 1, Width: "4x", Speed: "???", Line: 4}}},
				"000000000000000c": {Type: NodeRouter, GUID: "000000000000000c", Description: "router-1"},
			},
		},
		{
			name: "adapters listed without port lines",
			input: "Switch 8 \"S-0000000000000011\" # \"MF0;leaf-01:MQM8700/U1\" enhanced port 0 lid 11 lmc 0\n" +
				"[2] \"H-0000000000000101\"[1] # \"node-a mlx5_0\" lid 101 4xNDR\n\n" +
				"Ca 1 \"H-0000000000000101\" # \"node-a mlx5_0\"\n",
			want: map[string]*Node{
				"0000000000000011": {Type: NodeSwitch, GUID: "0000000000000011", Description: "MF0;leaf-01:MQM8700/U1", Ports: 8, Line: 1,
					Links: []Link{{Port: 2, Peer: "0000000000000101", PeerType: NodeCA, PeerPort: 1, Width: "4x", Speed: "NDR", Line: 2}}},
				"0000000000000101": {Type: NodeCA, GUID: "0000000000000101", Description: "node-a mlx5_0", Ports: 1, Line: 4},
			},
		},
		{
			name:  "port line without width and speed",
			input: "Switch\t2 \"S-1\"\t\t# \"sw\" base port 0 lid 1 lmc 0\n[1]\t\"S-2\"[1]\t\t# \"sw2\" lid 2\n",
			want: map[string]*Node{
				"0000000000000001": {Type: NodeSwitch, GUID: "0000000000000001", Description: "sw", Ports: 2, Line: 1,
					Links: []Link{{Port: 1, Peer: "0000000000000002", PeerType: NodeSwitch, PeerPort: 1, Line: 2}}},
				"0000000000000002": {Type: NodeSwitch, GUID: "0000000000000002", Description: "sw2"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fab, err := ParseIBNetDiscover(strings.NewReader(tc.input))
			if err != nil {
				t.Fatalf("ParseIBNetDiscover: %v", err)
			}
			got := make(map[string]*Node)
			for _, n := range fab.Nodes() {
				got[n.GUID] = n
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nodes (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseIBNetDiscoverErrors(t *testing.T) {
	const sw = "Switch\t4 \"S-0000000000000001\"\t\t# \"leaf\" enhanced port 0 lid 1 lmc 0\n"
	tests := []struct {
		name    string
		input   string
		wantErr string
	}{
		{"empty", "", "ibnetdiscover: no Switch, Ca or Rt blocks found; is this ibnetdiscover's topology output?"},
		{"comments only", "#\n# Topology file\n#\n", "ibnetdiscover: no Switch, Ca or Rt blocks found; is this ibnetdiscover's topology output?"},
		{"ports report instead of topology", "CA    12  1 0x0002c90300a1b2c1 4x QDR - SW     7  1 0x0002c90000f1e2d0 ( 'cn001 HCA-1' - 'sw' )\n",
			`ibnetdiscover line 1: unrecognised line "CA    12  1 0x0002c90300a1b2c1 4x QDR - "...: expected a node header (Switch, Ca, Rt), a port line ([n] ...), key=value or a # comment`},
		{"port line outside a block", "vendid=0x2c9\n[1]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n",
			"ibnetdiscover line 2: port line outside a Switch, Ca or Rt block"},
		{"port line after the blank line ending its block", sw + "\n[1]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n",
			"ibnetdiscover line 3: port line outside a Switch, Ca or Rt block"},
		{"port count missing", "Switch\t\"S-1\" # \"x\"\n",
			`ibnetdiscover line 1: Switch header: expected a port count (1-254) after "Switch", found "\"S-1\" # \"x\""`},
		{"header type mismatch", "Ca\t1 \"S-1\"\t\t# \"x\"\n",
			`ibnetdiscover line 1: Ca header names "S-0000000000000001", which is a Switch`},
		{"GUID not hex", "Switch\t4 \"S-00zz\"\t\t# \"x\"\n",
			`ibnetdiscover line 1: Switch header: node name "\"S-00zz\"": GUID must be 1 to 16 hex digits`},
		{"GUID too long", "Switch\t4 \"S-00000000000000001\"\t\t# \"x\"\n",
			`ibnetdiscover line 1: Switch header: node name "\"S-00000000000000001\"": GUID must be 1 to 16 hex digits`},
		{"unknown node type letter", "Switch\t4 \"X-1\"\t\t# \"x\"\n",
			`ibnetdiscover line 1: Switch header: node name "\"X-1\"\t\t# \"x\"": type must be S, H or R`},
		{"description not quoted", "Switch\t4 \"S-1\"\t\t# leaf\n",
			`ibnetdiscover line 1: Switch header: expected a quoted node description, found "leaf"`},
		{"description unterminated", "Switch\t4 \"S-1\"\t\t# \"leaf\n",
			`ibnetdiscover line 1: Switch header: expected a quoted node description, found "\"leaf"`},
		{"comment marker missing", "Ca\t1 \"H-1\" \"node-01 mlx5_0\"\n",
			`ibnetdiscover line 1: Ca header: expected # "<description>" after the GUID, found "\"node-01 mlx5_0\""`},
		{"node listed twice", sw + "\n" + sw,
			"ibnetdiscover line 3: node S-0000000000000001 is listed twice (first on line 1)"},
		{"port zero", sw + "[0]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n",
			`ibnetdiscover line 2: expected a port number [1-254] at the start of the line, found "[0]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR"`},
		{"port beyond the count", sw + "[5]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n",
			"ibnetdiscover line 2: port 5 is beyond the 4 ports of S-0000000000000001"},
		{"port listed twice", sw + "[1]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n[1]\t\"S-3\"[1]\t\t# \"y\" lid 3 4xHDR\n",
			"ibnetdiscover line 3: port 1 of S-0000000000000001 is listed twice"},
		{"peer port missing", sw + "[1]\t\"S-2\"\t\t# \"x\" lid 2 4xHDR\n",
			`ibnetdiscover line 2: port 1: expected the peer's port number [1-254] after "S-0000000000000002", found "\t\t# \"x\" lid 2 4xHDR"`},
		{"peer name unterminated", sw + "[1]\t\"S-2[1]\t\t# x lid 2 4xHDR\n",
			`ibnetdiscover line 2: port 1: node name "\"S-2[1]\t\t# x lid 2 4xHDR" has no closing quote`},
		{"peer port GUID malformed", sw + "[1]\t\"H-2\"[1](xyz) \t\t# \"x\" lid 2 4xHDR\n",
			`ibnetdiscover line 2: port 1: expected (<peer port GUID>), found "(xyz) \t\t# \"x\" lid 2 4xHDR"`},
		{"lid without a number", sw + "[1]\t\"S-2\"[1]\t\t# \"x\" lid four 4xHDR\n",
			`ibnetdiscover line 2: port 1: expected a number after "lid", found " lid four 4xHDR"`},
		{"words before lid", sw + "[1]\t\"S-2\"[1]\t\t# \"x\" 4xHDR\n",
			`ibnetdiscover line 2: port 1: expected "lid <n>" after the peer's description, found " 4xHDR"`},
		{"adapter lid without lmc", "Ca\t1 \"H-1\"\t\t# \"n mlx5_0\"\n[1](1) \t\"S-2\"[1]\t\t# lid 4 \"leaf\" lid 2 4xHDR\n",
			`ibnetdiscover line 2: port 1: expected "lid <n> lmc <n>" before the peer's description, found "\"leaf\" lid 2 4xHDR"`},
		{"peer type disagrees with its block", sw + "[1]\t\"S-2\"[1]\t\t# \"x\" lid 2 4xHDR\n\nCa\t1 \"H-2\"\t\t# \"n mlx5_0\"\n",
			"ibnetdiscover line 2: peer S-0000000000000002 is a Ca on line 4"},
		{"line too long", sw + "# " + strings.Repeat("x", maxLineBytes) + "\n",
			"ibnetdiscover line 2: line longer than 1048576 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fab, err := ParseIBNetDiscover(strings.NewReader(tc.input))
			if err == nil {
				t.Fatalf("ParseIBNetDiscover succeeded with %d nodes, want error %q", len(fab.Nodes()), tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want,+got):\n%s", diff)
			}
		})
	}
}
