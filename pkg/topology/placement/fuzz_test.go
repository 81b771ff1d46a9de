package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// FuzzPlace places random gangs on random snapshots (every profile, nodes
// without topology, partial labels, GB200 cliques, scarce CPU, memory and
// pod slots) and checks that Place returns a valid plan exactly when a
// domain within the constraint has room, and an *Unschedulable otherwise,
// with a Preferred gang's widening counted from the narrowest level that
// could hold it with every GPU free.
func FuzzPlace(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(8), uint16(1000), uint8(0), uint8(0), uint8(0))
	f.Add(uint64(2), uint8(1), uint8(2), uint16(0), uint8(3), uint8(1), uint8(0))
	f.Add(uint64(3), uint8(9), uint8(4), uint16(4000), uint8(2), uint8(2), uint8(4))
	f.Add(uint64(4), uint8(20), uint8(1), uint16(500), uint8(4), uint8(2), uint8(3))
	f.Add(uint64(5), uint8(5), uint8(0), uint16(8000), uint8(1), uint8(1), uint8(0))
	selectors := map[string]*topology.Selector{}
	for _, p := range topology.Profiles() {
		node, err := p.Node()
		if err != nil {
			f.Fatal(err)
		}
		if selectors[p.Name], err = topology.NewSelector(node); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, members, gpus uint8, milliCPU uint16, level, mode, widen uint8) {
		c := newCluster(t)
		c.selectors = selectors
		rng := rand.New(rand.NewPCG(seed, 0))
		randomNodes(c, rng)
		s := c.snapshot()
		names := s.Tree.LevelNames()
		pick := func(i uint8) string { // "" or a level name
			return append([]string{""}, names...)[int(i)%(len(names)+1)]
		}
		g := Gang{
			Members:           1 + int(members)%24,
			GPUsPerMember:     int(gpus) % 9,
			MilliCPUPerMember: int64(milliCPU),
			MemoryPerMember:   rng.Int64N(8 << 30),
			Level:             pick(level),
			Mode:              []lockstep.ConstraintMode{lockstep.Required, lockstep.Preferred, ""}[mode%3],
			// Past the widest level (6 with host and cluster) too.
			Widen:    int(widen) % 8,
			Channels: seed%3 == 0,
		}
		plan, err := Place(s, g, Options{})
		checkPlace(t, s, g, plan, err)
	})
}

// randomNodes adds 1 to 24 nodes of random shape, labels and headroom.
func randomNodes(c *cluster, rng *rand.Rand) {
	profiles := topology.ProfileNames()
	for i := range 1 + rng.IntN(24) {
		where := at{
			leaf:  []string{"", "l0", "l1", "l2"}[rng.IntN(4)],
			spine: []string{"", "s0", "s1"}[rng.IntN(3)],
		}
		profile := ""
		if j := rng.IntN(len(profiles) + 1); j < len(profiles) {
			profile = profiles[j]
		}
		if profile == "gb200-nvl72" {
			where.clique = []string{"1", "2", "3"}[rng.IntN(3)]
		}
		// Free sets may name GPUs the node lacks; Place must ignore them.
		free := topology.GPUSet(rng.Uint64() & 0x3ff)
		n := c.add(fmt.Sprintf("n%02d", i), profile, free, where)
		n.FreeMilliCPU = rng.Int64N(20_000) - 1_000
		n.FreeMemory = rng.Int64N(64 << 30)
		n.FreePods = rng.IntN(6) - 1
		// Gangs that claim ComputeDomain channels (Gang.Channels) count
		// them; others must not.
		n.Channels = rng.IntN(3)
		n.FreeChannels = rng.IntN(n.Channels + 1)
	}
}

// checkPlace checks Place's answer against an independent computation of
// the narrowest level at which some domain within the constraint has room.
func checkPlace(t *testing.T, s *Snapshot, g Gang, plan *Plan, err error) {
	t.Helper()
	names := s.Tree.LevelNames()
	top := len(names) - 1
	// usable and total give a node's GPUs and channels now and with every
	// one free.
	usable := func(n *Node) (topology.GPUSet, int) {
		if n.Topology == nil {
			return n.FreeGPUs, n.FreeChannels
		}
		return n.FreeGPUs & n.Topology.AllGPUs(), n.FreeChannels
	}
	total := func(n *Node) (topology.GPUSet, int) {
		if n.Topology == nil {
			return n.FreeGPUs, n.Channels
		}
		return n.Topology.AllGPUs(), n.Channels
	}
	// narrowest returns the narrowest level from lowest up where a domain
	// has room for the gang with each node's GPUs and channels given by
	// free, or -1.
	narrowest := func(lowest int, free func(*Node) (topology.GPUSet, int)) int {
		for level := lowest; level <= top; level++ {
			room := map[*topology.Domain]int{}
			for _, n := range s.Nodes {
				r := max(0, n.FreePods)
				gpus, channels := free(n)
				if g.GPUsPerMember > 0 {
					r = min(r, gpus.Len()/g.GPUsPerMember)
				}
				if g.Channels {
					r = min(r, channels)
				}
				if g.MilliCPUPerMember > 0 {
					r = min(r, int(max(0, n.FreeMilliCPU)/g.MilliCPUPerMember))
				}
				if g.MemoryPerMember > 0 {
					r = min(r, int(max(0, n.FreeMemory)/g.MemoryPerMember))
				}
				d := s.Tree.Path(n.Name)[level]
				if room[d] += r; room[d] >= g.Members {
					return level
				}
			}
		}
		return -1
	}
	// widen climbs n levels from level, passing over levels no node is
	// labelled for (they hold the same nodes as the level above), at most
	// to limit.
	widen := func(level, n, limit int) int {
		skip := func(l int) int {
			for l < top && s.Tree.LevelAbsent(l) {
				l++
			}
			return l
		}
		level = skip(level)
		for ; n > 0 && level < limit; n-- {
			level = skip(level + 1)
		}
		return min(level, limit)
	}
	stop, base, want := top, top, top
	if g.Level != "" {
		want = slices.Index(names, g.Level)
		base, stop = want, want
		from, limit := want, top
		if g.Mode != lockstep.Preferred {
			// Required is placed tightest first: it widens from the host
			// as a Preferred gang does, never past Level.
			from, limit = 0, want
		}
		// The widening counts from the narrowest level at or above from
		// that could hold the gang with every GPU free.
		if base = narrowest(from, total); base < 0 {
			base = top
		}
		base = widen(base, 0, top)
		stop = widen(base, g.Widen, limit)
	}
	fits := narrowest(0, usable) // the narrowest level where a domain has room now

	var u *Unschedulable
	switch {
	case errors.As(err, &u):
		if fits >= 0 && fits <= stop {
			t.Fatalf("Place(%+v) = %v, but a %s has room", g, u, names[fits])
		}
		if u.Reason == "" {
			t.Fatal("Unschedulable without a reason")
		}
		if (u.WiderLevel != "") != (fits > stop) {
			t.Fatalf("Place(%+v) = %v with wider level %q; a domain fits at %d, the constraint stops at %d", g, u, u.WiderLevel, fits, stop)
		}
		// The reason names skipped levels exactly when the constraint is
		// what stops a Preferred gang that skipped some.
		skipped := "skipped to " + names[base] + " "
		if named := g.Mode == lockstep.Preferred && fits > stop && base > want; named != strings.Contains(u.Reason, skipped) {
			t.Fatalf("Place(%+v) = %q; want %q in it: %v", g, u.Reason, skipped, named)
		}
		return
	case err != nil:
		t.Fatalf("Place(%+v): %v", g, err)
	case fits < 0 || fits > stop:
		t.Fatalf("Place(%+v) placed %v, but no domain within %q has room", g, plan.Members, names[stop])
	case len(plan.Members) != g.Members:
		t.Fatalf("plan has %d members, want %d", len(plan.Members), g.Members)
	}

	byName := map[string]*Node{}
	for _, n := range s.Nodes {
		byName[n.Name] = n
	}
	counts := map[string]int{}
	taken := map[string]topology.GPUSet{}
	for i, m := range plan.Members {
		n := byName[m.Node]
		if n == nil {
			t.Fatalf("members[%d] is on unknown node %q", i, m.Node)
		}
		if counts[m.Node] > 0 && plan.Members[i-1].Node != m.Node {
			t.Fatalf("members on %s are not adjacent: %v", m.Node, plan.Members)
		}
		counts[m.Node]++
		switch {
		case m.GPUs.Len() != g.GPUsPerMember:
			t.Fatalf("members[%d] has GPUs %v, want %d", i, m.GPUs, g.GPUsPerMember)
		case m.GPUs&^n.FreeGPUs != 0 || (n.Topology != nil && m.GPUs&^n.Topology.AllGPUs() != 0):
			t.Fatalf("members[%d] has GPUs %v, not all free on %s (%v)", i, m.GPUs, m.Node, n.FreeGPUs)
		case m.GPUs&taken[m.Node] != 0:
			t.Fatalf("members[%d] reuses GPUs %v on %s", i, m.GPUs&taken[m.Node], m.Node)
		}
		taken[m.Node] |= m.GPUs
	}
	for name, count := range counts {
		n := byName[name]
		if int64(count)*g.MilliCPUPerMember > n.FreeMilliCPU && g.MilliCPUPerMember > 0 ||
			int64(count)*g.MemoryPerMember > n.FreeMemory && g.MemoryPerMember > 0 ||
			count > n.FreePods || g.Channels && count > n.FreeChannels {
			t.Fatalf("%d members overrun node %s: %+v", count, name, *n)
		}
		path := s.Tree.Path(name)
		if !slices.Contains(path, plan.Domain) {
			t.Fatalf("plan domain %s does not contain node %s", plan.Domain.ID, name)
		}
		// Rule 2: the gang is within one domain of the narrowest level with room.
		first := s.Tree.Path(plan.Members[0].Node)
		if path[fits] != first[fits] {
			t.Fatalf("members span %s and %s, but one %s has room", path[fits].ID, first[fits].ID, names[fits])
		}
	}
	if plan.LevelName != plan.Domain.LevelName {
		t.Fatalf("level name %q, domain level %q", plan.LevelName, plan.Domain.LevelName)
	}
	if plan.Efficiency < 0 || plan.Efficiency > 1 {
		t.Fatalf("efficiency %v out of [0, 1]", plan.Efficiency)
	}
}
