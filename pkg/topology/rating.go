package topology

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// DefaultMessageBytes is the all-reduce size placements are rated with: 1
// GiB, a typical gradient bucket sweep.
const DefaultMessageBytes = 1 << 30

// Rating is how good a gang's placement is, and why: the one definition of
// placement efficiency that the scheduler (PodGroup annotations), the
// controller (TrainingJob status.placement), the bench and the kubectl
// plugin all report.
type Rating struct {
	// Efficiency is Best.Time / Actual.Time in (0, 1]: 1 when the placement
	// is as good as the reference. A placement of one GPU is 1. It is 0 when
	// no member's GPUs match a built-in profile, so there is no reference.
	Efficiency float64
	// Actual is the modelled all-reduce on the placement; Best on the
	// reference placement (see Rater.Rate).
	Actual, Best Estimate
	// Profile names the built-in profile of the reference: the one holding
	// most of the placement's GPUs (ties: the first by name).
	Profile string
	// Domain is the narrowest domain holding every member, never the
	// pass-through domain of an absent level; nil for a single member given
	// without a Path. LevelName is its level ("host" for one node).
	Domain    *Domain
	LevelName string
	// LevelsSpanned counts the levels a gang crosses up to Domain: 0 on one
	// node, then one per level up to and including Domain's at which some
	// member has a labelled domain. Absent levels, and levels the members'
	// nodes carry no label for, are not counted: two trays of one leaf
	// without a clique label span 1 level (leaf), not 2.
	LevelsSpanned int
	// Reason explains the efficiency in one sentence: where the gang is and
	// what it loses against the reference, e.g. "spans 2 leaves (l1, l2)
	// under spine s1; crossing the 2:1 oversubscribed spine cuts bus
	// bandwidth from 50.0 to 25.0 GB/s".
	Reason string
}

// Rater rates placements on one cluster: its levels and oversubscription
// and, for the reference, how many nodes of each profile the fullest domain
// of each level holds. Build it once per cluster shape (the scheduler per
// domain tree, the bench per model); it caches reference estimates by
// profile and GPU count and is safe for concurrent use.
type Rater struct {
	levels       []Level
	fabric       Fabric
	messageBytes int64
	// levelNames, tiers and absent describe the tree levels by index: host,
	// the configured levels, cluster.
	levelNames []string
	tiers      []int
	absent     []bool
	// most[profile][level] is the most nodes of profile in one domain of a
	// tree level; nil without a tree.
	most map[string][]int

	mu   sync.Mutex
	refs map[referenceKey]reference
}

type referenceKey struct {
	profile string
	gpus    int
}

type reference struct {
	est    Estimate
	shared bool
	err    error
}

// NewRater returns a Rater for the topology configuration cfg. tree is the
// domain tree of the whole cluster built with cfg.Levels, and profileOf names
// the built-in profile of each of its nodes ("" when unknown; see
// ProfileFromLabels): together they say which domains could hold the
// reference. messageBytes is the modelled all-reduce size, 0 for
// DefaultMessageBytes.
//
// tree may be nil when the cluster is unknown: the reference then assumes,
// as BestAllReduce does, that one domain of the narrowest network level
// holds any gang, which rates a gang bigger than a leaf below 1 under an
// oversubscribed spine. So do profiles of which the tree has too few known
// nodes.
func NewRater(cfg lockstep.TopologyConfig, tree *Tree, profileOf func(node string) string, messageBytes int64) (*Rater, error) {
	if err := lockstep.ValidateLevels(cfg.Levels); err != nil {
		return nil, fmt.Errorf("invalid levels: %w", err)
	}
	if messageBytes < 0 {
		return nil, fmt.Errorf("message size %d bytes: want at least 0", messageBytes)
	}
	if messageBytes == 0 {
		messageBytes = DefaultMessageBytes
	}
	r := &Rater{
		levels:       slices.Clone(cfg.Levels),
		fabric:       Fabric{Oversubscription: cfg.Oversubscription},
		messageBytes: messageBytes,
		refs:         map[referenceKey]reference{},
	}
	top := len(cfg.Levels) + 1
	if tree == nil {
		r.levelNames = append(append([]string{lockstep.LevelHost}, levelNames(cfg.Levels)...), lockstep.LevelCluster)
		r.tiers = levelTiers(cfg.Levels, presentAll(len(cfg.Levels)))
		r.absent = make([]bool, top+1)
		return r, nil
	}
	if !slices.Equal(tree.levelNames[1:top], levelNames(cfg.Levels)) {
		return nil, fmt.Errorf("the tree's levels %v are not the configuration's %v", tree.levelNames[1:top], levelNames(cfg.Levels))
	}
	r.levelNames = tree.LevelNames()
	r.tiers = make([]int, top+1)
	r.absent = make([]bool, top+1)
	r.most = map[string][]int{}
	for level := 1; level <= top; level++ {
		domains := tree.byLevel[level]
		if len(domains) > 0 {
			r.tiers[level] = domains[0].tier
			r.absent[level] = domains[0].absent()
		}
		for _, d := range domains {
			count := map[string]int{}
			for _, n := range d.Nodes {
				if p := profileOf(n); p != "" {
					count[p]++
				}
			}
			for p, n := range count {
				if r.most[p] == nil {
					r.most[p] = make([]int, top+1)
				}
				r.most[p][level] = max(r.most[p][level], n)
			}
		}
	}
	return r, nil
}

func levelNames(levels []Level) []string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.Name
	}
	return names
}

func presentAll(n int) []bool {
	p := make([]bool, n)
	for i := range p {
		p[i] = true
	}
	return p
}

// Rate rates a gang's placement: members as for EstimateAllReduce (distinct
// nodes; Paths from the Rater's tree when there are several).
//
// The efficiency is t(reference) / t(actual) in (0, 1] with the alpha-beta
// model of EstimateAllReduce. The reference is the best placement of as
// many GPUs of the profile holding most of the placement's GPUs on this
// cluster when empty: whole nodes and the remainder on one more node in its
// best GPU set; on one node if they fit; in one multi-node NVLink domain if
// the profile has one that holds them; else in one domain of the narrowest
// network level that has a domain with enough nodes of the profile (the
// cluster if none has). So a gang too big for any leaf, placed under one
// spine, rates 1 even when the spine is oversubscribed.
func (r *Rater) Rate(members []Member) (Rating, error) {
	actual, err := EstimateAllReduce(members, r.messageBytes, r.fabric)
	if err != nil {
		return Rating{}, err
	}
	rt := Rating{Actual: actual, LevelName: lockstep.LevelHost}
	if len(members) > 1 || members[0].Path != nil {
		rt.Domain = members[0].Path[0]
		if len(members) > 1 {
			rt.Domain = members[0].Path[actual.Level]
		}
		rt.LevelName = rt.Domain.LevelName
		rt.LevelsSpanned = levelsSpanned(members, rt.Domain.Level)
	}
	where := describeSpan(members, rt.Domain, r.levels)

	profile, ok := dominantProfile(members)
	if !ok {
		rt.Reason = where + "; no GPU product of the placement matches a built-in profile, so there is no reference to rate it against"
		return rt, nil
	}
	rt.Profile = profile.Name
	ref, err := r.reference(profile, actual.GPUs)
	if err != nil {
		return Rating{}, err
	}
	rt.Best = ref.est
	rt.Efficiency = Efficiency(ref.est, actual)
	rt.Reason = where + "; " + r.why(members, rt, ref.shared)
	return rt, nil
}

// LevelsSpanned returns how many levels a gang on nodes crosses, as
// Rating.LevelsSpanned counts them, for placements that cannot be rated.
func (t *Tree) LevelsSpanned(nodes []string) (int, error) {
	d, err := t.LowestCommonDomain(nodes)
	if err != nil {
		return 0, err
	}
	members := make([]Member, len(nodes))
	for i, n := range nodes {
		members[i].Path = t.Path(n)
	}
	return levelsSpanned(members, d.Level), nil
}

// levelsSpanned counts the tree levels 1 to top at which some member has a
// labelled (not synthetic) domain.
func levelsSpanned(members []Member, top int) int {
	n := 0
	for level := 1; level <= top; level++ {
		for _, m := range members {
			if !m.Path[level].Synthetic {
				n++
				break
			}
		}
	}
	return n
}

// dominantProfile is the built-in profile holding most of the members'
// GPUs, ties to the first by name.
func dominantProfile(members []Member) (Profile, bool) {
	// GPUs per built-in profile, in the registry's order (by name); the
	// profiles are few, so a slice, which stays on the stack, beats a map.
	type count struct {
		p    *Profile
		gpus int
	}
	counts := make([]count, 0, 8)
	for _, m := range members {
		p := nodeProfile(m.Node)
		if p == nil {
			continue
		}
		i := 0
		for i < len(counts) && counts[i].p != p {
			i++
		}
		if i == len(counts) {
			counts = append(counts, count{p: p})
		}
		counts[i].gpus += m.GPUs.Len()
	}
	var best count
	for _, c := range counts {
		if best.p == nil || c.gpus > best.gpus || c.gpus == best.gpus && c.p.Name < best.p.Name {
			best = c
		}
	}
	if best.p == nil {
		return Profile{}, false
	}
	return *best.p, true
}

// reference estimates the best placement of gpus GPUs of p (see Rate).
func (r *Rater) reference(p Profile, gpus int) (reference, error) {
	key := referenceKey{p.Name, gpus}
	r.mu.Lock()
	ref, ok := r.refs[key]
	r.mu.Unlock()
	if ok {
		return ref, ref.err
	}
	costs, shared, err := bestCosts(p, gpus)
	if err == nil {
		ref.shared = shared
		ref.est, err = ringEstimate(costs, r.referenceSpan(p.Name, len(costs), shared), shared, r.messageBytes, r.fabric)
	}
	if err != nil {
		ref.err = fmt.Errorf("estimating the best placement of %d GPUs of %s: %w", gpus, p.Name, err)
	}
	r.mu.Lock()
	r.refs[key] = ref
	r.mu.Unlock()
	return ref, ref.err
}

// referenceSpan is where the reference placement of nodes nodes of profile
// meets: the host; the narrowest NVLink level when they share an NVLink
// domain; else the narrowest present network level with a domain holding
// that many nodes of the profile, or the cluster.
func (r *Rater) referenceSpan(profile string, nodes int, nvlinkShared bool) span {
	if nodes == 1 {
		return span{level: 0, name: lockstep.LevelHost}
	}
	top := len(r.levels) + 1
	if nvlinkShared {
		for i, l := range r.levels {
			if l.NVLink {
				return span{level: i + 1, name: l.Name, tier: max(1, r.tiers[i+1])}
			}
		}
	}
	most := r.most[profile]
	known := most != nil && most[top] >= nodes
	for level := 1; level < top; level++ {
		if r.levels[level-1].NVLink || r.absent[level] {
			continue
		}
		if !known || most[level] >= nodes {
			return span{level: level, name: r.levelNames[level], tier: r.tiers[level]}
		}
	}
	return span{level: top, name: lockstep.LevelCluster, tier: r.tiers[top]}
}

// bestCosts are the members of the best placement of gpus GPUs of p: full
// nodes, the remainder on one more node in its best GPU set. shared says
// they fit in one multi-node NVLink domain of the profile.
func bestCosts(p Profile, gpus int) ([]memberCost, bool, error) {
	if gpus < 1 {
		return nil, false, fmt.Errorf("gpus = %d: want at least 1", gpus)
	}
	node, err := p.Node()
	if err != nil {
		return nil, false, err
	}
	sel, err := NewSelector(node)
	if err != nil {
		return nil, false, fmt.Errorf("profile %q: %w", p.Name, err)
	}
	perNode := node.NumGPUs()
	nodes := (gpus + perNode - 1) / perNode
	last, _, _ := sel.Best(node.AllGPUs(), gpus-perNode*(nodes-1))
	costs := make([]memberCost, nodes)
	for i := range costs {
		costs[i] = newMemberCost(node, node.AllGPUs())
	}
	costs[nodes-1] = newMemberCost(node, last)
	return costs, node.NVLinkDomain != nil && nodes <= p.NVLinkDomainNodes, nil
}

// NodeProfile returns the built-in profile whose GPU product the node's
// GPUs have.
func NodeProfile(node *NodeTopology) (Profile, bool) {
	if p := nodeProfile(node); p != nil {
		return *p, true
	}
	return Profile{}, false
}

// nodeProfile is NodeProfile without copying: the registry's entry, or nil.
func nodeProfile(node *NodeTopology) *Profile {
	if node == nil || len(node.GPUs) == 0 {
		return nil
	}
	return profileByProduct(node.GPUs[0].Product)
}

// ProfileByProduct returns the built-in profile of a GPU product, written
// either as NVML does ("NVIDIA H100 80GB HBM3") or as GPU feature discovery's
// nvidia.com/gpu.product label and the profiles do ("NVIDIA-H100-80GB-HBM3").
func ProfileByProduct(product string) (Profile, bool) {
	if p := profileByProduct(product); p != nil {
		return *p, true
	}
	return Profile{}, false
}

// profileByProduct is ProfileByProduct without allocating: it compares the
// product's words with the label's "-"-separated segments in place of
// building ProductLabel(product).
func profileByProduct(product string) *Profile {
	profiles := builtinProfiles()
	for i := range profiles {
		if profiles[i].GPUProduct != "" && sameProduct(product, profiles[i].GPUProduct) {
			return &profiles[i]
		}
	}
	return nil
}

// sameProduct reports whether ProductLabel(name) == label, without
// allocating.
func sameProduct(name, label string) bool {
	if name == label && strings.IndexFunc(name, unicode.IsSpace) < 0 {
		return true
	}
	first := true
	for field := range strings.FieldsSeq(name) {
		if !first {
			if !strings.HasPrefix(label, "-") {
				return false
			}
			label = label[1:]
		}
		first = false
		if !strings.HasPrefix(label, field) {
			return false
		}
		label = label[len(field):]
	}
	return !first && label == ""
}

// ProductLabel writes an NVML product name the way the
// nvidia.com/gpu.product label and the profiles do: "NVIDIA H100 80GB HBM3"
// becomes "NVIDIA-H100-80GB-HBM3".
func ProductLabel(name string) string {
	return strings.Join(strings.Fields(name), "-")
}

// ProfileFromLabels returns the built-in profile of a node from its labels:
// lockstep.dev/profile on simulated nodes, else the GPU product the topology
// agent (lockstep.dev/gpu-product) or GPU feature discovery
// (nvidia.com/gpu.product) wrote. It is how callers of NewRater name the
// profile of nodes they have no topology for.
func ProfileFromLabels(labels map[string]string) (Profile, bool) {
	if p, ok := LookupProfile(labels[lockstep.LabelProfile]); ok {
		return p, true
	}
	if p, ok := ProfileByProduct(labels[lockstep.LabelGPUProduct]); ok {
		return p, true
	}
	return ProfileByProduct(labels[lockstep.LabelNVIDIAGPUProduct])
}

// DisplayID names a domain the way annotations, status and reports show
// it: its ID without the segments of synthetic domains ("block=()" of an
// absent level, "leaf=(node)" of a node without the label), e.g.
// "spine=s1/leaf=l2", "spine=s1/leaf=l2/host=node-7" for a host, "cluster"
// for the root. Host names are unique, so it still names one domain.
func (d *Domain) DisplayID() string {
	if d == nil {
		return ""
	}
	parts := strings.Split(d.ID, "/")
	kept := parts[:0]
	for _, p := range parts {
		if !strings.HasSuffix(p, ")") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "/")
}

// describeSpan says where the members are: "on one node n1", "on 3 nodes
// in leaf l1", "spans 2 leaves (l1, l2) under spine s1".
func describeSpan(members []Member, d *Domain, levels []Level) string {
	if len(members) == 1 {
		if d == nil {
			return "on one node"
		}
		return "on one node " + d.Value
	}
	// The members' domains at the widest labelled level below d.
	below := 0
	for level := d.Level - 1; level > 0; level-- {
		if !members[0].Path[level].absent() {
			below = level
			break
		}
	}
	var names []string
	synthetic := 0
	for _, m := range members {
		c := m.Path[below]
		if c.Synthetic && below > 0 {
			synthetic++
		}
		if !slices.Contains(names, c.Value) {
			names = append(names, c.Value)
		}
	}
	slices.Sort(names)
	under := "in " + domainPhrase(d)
	if below == 0 || synthetic == len(members) {
		return fmt.Sprintf("on %d nodes %s", len(members), under)
	}
	kind := members[0].Path[below].LevelName
	noun := plural(kind)
	if levels[below-1].NVLink {
		return fmt.Sprintf("split across %d NVLink %s (%s) %s", len(names), noun, listNames(names), under)
	}
	if d.Level == len(levels)+1 {
		under = "across the cluster"
	} else {
		under = "under " + domainPhrase(d)
	}
	return fmt.Sprintf("spans %d %s (%s) %s", len(names), noun, listNames(names), under)
}

func domainPhrase(d *Domain) string {
	if d.Parent == nil {
		return "the cluster"
	}
	return d.LevelName + " " + d.Value
}

func listNames(names []string) string {
	const most = 4
	if len(names) > most {
		return strings.Join(names[:most], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}

func plural(s string) string {
	switch {
	case strings.HasSuffix(s, "f"):
		return s[:len(s)-1] + "ves"
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	}
	return s + "s"
}

// why says what the placement loses against the reference.
func (r *Rater) why(members []Member, rt Rating, refShared bool) string {
	a, b := rt.Actual, rt.Best
	if a.GPUs < 2 {
		return "one GPU: no communication to slow down"
	}
	if rt.Efficiency >= 0.9995 {
		return fmt.Sprintf("as fast as the best placement (bus bandwidth %s GB/s)", gbps(a.BottleneckGBps))
	}
	if a.BottleneckGBps < b.BottleneckGBps*(1-1e-9) {
		shared := len(members) > 1
		for _, m := range members[1:] {
			shared = shared && sameNVLinkDomain(members[0].Node.NVLinkDomain, m.Node.NVLinkDomain)
		}
		if refShared && len(members) > 1 && !shared {
			return fmt.Sprintf("leaving the NVLink domain drops bus bandwidth from %s GB/s over NVLink to %s GB/s over the network", gbps(b.BottleneckGBps), gbps(a.BottleneckGBps))
		}
		host := func(m Member) string {
			if m.Path != nil {
				return "node " + m.Path[0].Value
			}
			return "a node"
		}
		// The weakest link within a node, if that is the bottleneck.
		for _, m := range members {
			q := m.Node.SetQuality(m.GPUs)
			if q.GPUs > 1 && q.BottleneckGBps == a.BottleneckGBps {
				return fmt.Sprintf("GPUs %s of %s meet over a %s GB/s link, against %s GB/s for the best placement", m.GPUs.List(), host(m), gbps(a.BottleneckGBps), gbps(b.BottleneckGBps))
			}
		}
		if len(members) > 1 {
			o := r.fabric.oversubscription(a.LevelName)
			for _, m := range members {
				nic := m.Node.SetQuality(m.GPUs).NICGBpsPerGPU
				if nic/o != a.BottleneckGBps {
					continue
				}
				if o > 1 && nic >= b.BottleneckGBps {
					return fmt.Sprintf("crossing the %s:1 oversubscribed %s cuts bus bandwidth from %s to %s GB/s", strconv.FormatFloat(o, 'f', -1, 64), a.LevelName, gbps(b.BottleneckGBps), gbps(a.BottleneckGBps))
				}
				return fmt.Sprintf("GPUs %s of %s get %s GB/s each of NIC bandwidth, against %s GB/s for the best placement", m.GPUs.List(), host(m), gbps(nic), gbps(b.BottleneckGBps))
			}
		}
		return fmt.Sprintf("bus bandwidth %s GB/s against %s GB/s for the best placement", gbps(a.BottleneckGBps), gbps(b.BottleneckGBps))
	}
	return fmt.Sprintf("same bus bandwidth (%s GB/s) but more hops: latency %v against %v for the best placement", gbps(a.BottleneckGBps), a.Latency, b.Latency)
}

func gbps(v float64) string {
	if math.IsInf(v, 0) || v <= 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// MessageBytes returns the all-reduce size the Rater models.
func (r *Rater) MessageBytes() int64 { return r.messageBytes }
