package fabric

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
)

// Assignment is one host's place in the fabric.
type Assignment struct {
	// Host is the host name the input gives: the first word of the adapter's
	// node description (ibnetdiscover) or the instance id (topograph).
	Host string
	// Domains are the host's network domains, narrowest first: tier 1 (leaf),
	// tier 2 (spine group), tier 3 (core group), ... Each is a valid
	// Kubernetes label value. Empty for a host cabled to no switch.
	Domains []string
	// AcceleratorDomain is the host's multi-node NVLink domain
	// ("<cluster UUID>.<clique id>") where the input gives one; only
	// topograph does.
	AcceleratorDomain string
}

// SwitchTier is a switch and the tier derived for it.
type SwitchTier struct {
	GUID        string
	Description string
	// Tier is 1 for a leaf, 2 for a spine, 3 for a core, ...; 0 for a switch
	// no leaf reaches.
	Tier int
}

// Topology is the result of an import.
type Topology struct {
	// Assignments has one entry per host, sorted by host.
	Assignments []Assignment
	// Depth is the number of switch tiers: the longest Domains.
	Depth int
	// Switches lists every switch by tier, then GUID; ibnetdiscover only.
	Switches []SwitchTier
	// Warnings describe input that was left out, one sentence each.
	Warnings []string
}

// Options tunes Fabric.Topology.
type Options struct {
	// HostName maps a channel adapter's node description to the host it
	// belongs to; ok is false for an adapter that is not a host's. Nil means
	// HostFromNodeDescription.
	HostName func(description string) (host string, ok bool)
}

// HostFromNodeDescription is the default host rule: the first word of the
// node description, except for SHARP aggregation nodes and adapters still
// carrying the firmware's default description (both contain "Mellanox
// Technologies") and for "localhost", the name rdma-ndd writes before the
// host has its own.
func HostFromNodeDescription(description string) (string, bool) {
	host := firstField(strings.TrimSpace(description))
	if host == "" || strings.Contains(description, "Mellanox Technologies") {
		return "", false
	}
	if host == "localhost" || strings.HasPrefix(host, "localhost.") {
		return "", false
	}
	return host, true
}

// Topology derives switch tiers and per-host domains; the package
// documentation states the rules.
func (f *Fabric) Topology(opts Options) *Topology {
	hostName := opts.HostName
	if hostName == nil {
		hostName = HostFromNodeDescription
	}
	g := newCableGraph(f)
	topo := &Topology{}

	// Group host adapters by host; everything else that is not a switch
	// drops out of the graph. Skipped adapters are reported per description:
	// a Quantum fabric has one aggregation node per switch.
	adapters := make(map[string][]*Node)
	skipped := make(map[string][]string) // description → node IDs
	for _, n := range f.Nodes() {
		switch n.Type {
		case NodeCA:
			host, ok := hostName(n.Description)
			if !ok || host == "" {
				skipped[n.Description] = append(skipped[n.Description], n.ID())
				continue
			}
			adapters[host] = append(adapters[host], n)
		case NodeRouter:
			topo.Warnings = append(topo.Warnings, fmt.Sprintf("router %s %q skipped", n.ID(), n.Description))
		}
	}
	for _, desc := range slices.Sorted(maps.Keys(skipped)) {
		ids := skipped[desc]
		if len(ids) == 1 {
			topo.Warnings = append(topo.Warnings, fmt.Sprintf("adapter %s %q is not a host's; skipped", ids[0], desc))
			continue
		}
		topo.Warnings = append(topo.Warnings, fmt.Sprintf("%d adapters described %q are not hosts'; skipped (%s, ...)", len(ids), desc, ids[0]))
	}

	tiers := g.switchTiers(adapters)
	depth := 0
	for _, t := range tiers {
		depth = max(depth, t)
	}
	topo.Depth = depth
	groups := make([]map[string]string, depth+1) // tier → leaf GUID → group name
	for k := 2; k <= depth; k++ {
		groups[k] = g.groupNames(tiers, k)
	}

	for _, host := range slices.Sorted(maps.Keys(adapters)) {
		a := Assignment{Host: host}
		if leaf, ok := g.hostLeaf(adapters[host]); ok {
			a.Domains = append(a.Domains, "leaf-"+leaf)
			for k := 2; k <= depth; k++ {
				a.Domains = append(a.Domains, groups[k][leaf])
			}
		} else {
			topo.Warnings = append(topo.Warnings, fmt.Sprintf("host %s is cabled to no switch", host))
		}
		topo.Assignments = append(topo.Assignments, a)
	}

	for guid, n := range f.nodes {
		if n.Type == NodeSwitch {
			topo.Switches = append(topo.Switches, SwitchTier{GUID: guid, Description: n.Description, Tier: tiers[guid]})
		}
	}
	slices.SortFunc(topo.Switches, func(a, b SwitchTier) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), strings.Compare(a.GUID, b.GUID))
	})
	return topo
}

// cableGraph is the fabric as undirected adjacency, parallel cables merged.
type cableGraph struct {
	// switchPeers maps switch → the switches cabled to it.
	switchPeers map[string]map[string]bool
	// adapterPorts maps adapter GUID → its ports' switches, by port number.
	adapterPorts map[string]map[int]string
}

func newCableGraph(f *Fabric) *cableGraph {
	g := &cableGraph{
		switchPeers:  make(map[string]map[string]bool),
		adapterPorts: make(map[string]map[int]string),
	}
	// An adapter's own port lines come first, so that they win over a
	// switch's lines if the two disagree.
	nodes := f.Nodes()
	for _, n := range nodes {
		for _, l := range n.Links {
			if n.Type == NodeCA && l.PeerType == NodeSwitch {
				g.addAdapterPort(n.GUID, l.Port, l.Peer)
			}
		}
	}
	for _, n := range nodes {
		for _, l := range n.Links {
			switch {
			case n.Type == NodeSwitch && l.PeerType == NodeSwitch && n.GUID != l.Peer:
				g.addSwitchCable(n.GUID, l.Peer)
			case n.Type == NodeSwitch && l.PeerType == NodeCA:
				if _, known := g.adapterPorts[l.Peer][l.PeerPort]; !known {
					g.addAdapterPort(l.Peer, l.PeerPort, n.GUID)
				}
			}
		}
	}
	return g
}

func (g *cableGraph) addSwitchCable(a, b string) {
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		if g.switchPeers[pair[0]] == nil {
			g.switchPeers[pair[0]] = make(map[string]bool)
		}
		g.switchPeers[pair[0]][pair[1]] = true
	}
}

func (g *cableGraph) addAdapterPort(adapter string, port int, sw string) {
	if g.adapterPorts[adapter] == nil {
		g.adapterPorts[adapter] = make(map[int]string)
	}
	g.adapterPorts[adapter][port] = sw
}

// switchTiers returns the tier of every switch reached from a host's leaf.
func (g *cableGraph) switchTiers(adapters map[string][]*Node) map[string]int {
	tiers := make(map[string]int)
	var frontier []string
	for _, host := range slices.Sorted(maps.Keys(adapters)) {
		for _, a := range adapters[host] {
			for _, port := range slices.Sorted(maps.Keys(g.adapterPorts[a.GUID])) {
				sw := g.adapterPorts[a.GUID][port]
				if tiers[sw] == 0 {
					tiers[sw] = 1
					frontier = append(frontier, sw)
				}
			}
		}
	}
	for len(frontier) > 0 {
		var next []string
		for _, sw := range frontier {
			for _, peer := range slices.Sorted(maps.Keys(g.switchPeers[sw])) {
				if tiers[peer] == 0 {
					tiers[peer] = tiers[sw] + 1
					next = append(next, peer)
				}
			}
		}
		frontier = next
	}
	return tiers
}

// groupNames names, for every leaf, its tier-k group: the switches of tiers
// 1..k connected to it through switches of tiers 1..k.
func (g *cableGraph) groupNames(tiers map[string]int, k int) map[string]string {
	names := make(map[string]string)
	seen := make(map[string]bool)
	for _, start := range slices.Sorted(maps.Keys(tiers)) {
		if tiers[start] != 1 || seen[start] {
			continue
		}
		// Breadth-first over the group, noting its leaves and top switches.
		var leaves []string
		top, topGUID := 0, ""
		queue := []string{start}
		seen[start] = true
		for len(queue) > 0 {
			sw := queue[0]
			queue = queue[1:]
			t := tiers[sw]
			if t == 1 {
				leaves = append(leaves, sw)
			}
			if t > top || t == top && sw < topGUID {
				top, topGUID = t, sw
			}
			for peer := range g.switchPeers[sw] {
				if pt := tiers[peer]; pt >= 1 && pt <= k && !seen[peer] {
					seen[peer] = true
					queue = append(queue, peer)
				}
			}
		}
		name := tierRole(top) + "-group-" + topGUID
		if len(leaves) == 1 && top == 1 {
			name = "leaf-" + topGUID // a lone leaf: its widest domain repeats
		}
		for _, leaf := range leaves {
			names[leaf] = name
		}
	}
	return names
}

func sortAssignments(as []Assignment) {
	slices.SortFunc(as, func(a, b Assignment) int { return strings.Compare(a.Host, b.Host) })
}

func tierRole(tier int) string {
	switch tier {
	case 1:
		return "leaf"
	case 2:
		return "spine"
	case 3:
		return "core"
	}
	return fmt.Sprintf("tier%d", tier)
}

// hostLeaf picks the leaf of a host from its adapters: the switch most of
// them are cabled to, ties going to the first adapter's (natural order of
// descriptions, then GUIDs; its ports in order).
func (g *cableGraph) hostLeaf(adapters []*Node) (string, bool) {
	ordered := slices.Clone(adapters)
	slices.SortFunc(ordered, func(a, b *Node) int {
		return cmp.Or(naturalCompare(a.Description, b.Description), strings.Compare(a.GUID, b.GUID))
	})
	count := make(map[string]int)
	best := 0
	for _, a := range ordered {
		onSwitch := make(map[string]bool)
		for _, sw := range g.adapterPorts[a.GUID] {
			onSwitch[sw] = true
		}
		for sw := range onSwitch {
			count[sw]++
			best = max(best, count[sw])
		}
	}
	if best == 0 {
		return "", false
	}
	for _, a := range ordered {
		ports := g.adapterPorts[a.GUID]
		for _, port := range slices.Sorted(maps.Keys(ports)) {
			if count[ports[port]] == best {
				return ports[port], true
			}
		}
	}
	return "", false // unreachable: best > 0 means some adapter has a port
}

// naturalCompare orders strings with digit runs compared as numbers, so
// "mlx5_2" < "mlx5_10"; strings equal that way ("x7", "x007") fall back to
// plain order, keeping the order total.
func naturalCompare(a, b string) int {
	return cmp.Or(naturalCompareRuns(a, b), strings.Compare(a, b))
}

func naturalCompareRuns(a, b string) int {
	for a != "" && b != "" {
		da, db := isDigit(a[0]), isDigit(b[0])
		if da && db {
			na, ra := leadingDigits(a)
			nb, rb := leadingDigits(b)
			ta, tb := strings.TrimLeft(na, "0"), strings.TrimLeft(nb, "0")
			if c := cmp.Or(cmp.Compare(len(ta), len(tb)), strings.Compare(ta, tb)); c != 0 {
				return c
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// labelValue returns s when it is a valid Kubernetes label value and
// otherwise "x" and the FNV-64a hash of s in hex, as topograph does for
// values over 63 characters: distinct inputs stay distinct.
func labelValue(s string) string {
	if isLabelValue(s) {
		return s
	}
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("x%016x", h.Sum64())
}

// isLabelValue reports whether s is a valid non-empty Kubernetes label value:
// at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric.
func isLabelValue(s string) bool {
	if s == "" || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.' {
			return false
		}
	}
	return true
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
