package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// FuzzPreempt preempts for random gangs on random snapshots whose busy GPUs
// belong to random victims (gangs spanning nodes and single pods, of random
// priority and age) and checks Preempt against what it promises: victims are
// whole candidates of lower priority and unprotected; the gang fits once
// they are gone, and no victim could be spared; the answer does not depend
// on the order of the candidates; and it finds nothing only when evicting
// every eligible candidate would not let the gang fit within its constraint.
// Some nodes' GPUs come through a DRA allocator (Node.DRA, in a random
// device order), whose victims free the devices their claims held; some
// gangs have members that are pending (no node), which free nothing.
func FuzzPreempt(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(8), uint8(0), uint8(0))
	f.Add(uint64(2), uint8(2), uint8(4), uint8(2), uint8(1))
	f.Add(uint64(3), uint8(5), uint8(2), uint8(3), uint8(0))
	f.Add(uint64(4), uint8(1), uint8(8), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, members, gpus, level, mode uint8) {
		c := newCluster(t)
		rng := rand.New(rand.NewPCG(seed, 1))
		randomNodes(c, rng)
		for _, n := range c.nodes {
			// Plenty of CPU, memory and pods: the fuzz is about GPUs.
			n.FreeMilliCPU, n.FreeMemory, n.FreePods = 64_000, 512<<30, 110
			// One in three is served by a DRA allocator.
			if n.Topology != nil && rng.IntN(3) == 0 {
				n.DRA = randomDRAOrder(rng, n.Topology.AllGPUs().Len())
			}
		}
		s := c.snapshot()
		now := time.Unix(0, 0).Add(24 * time.Hour)
		candidates := randomVictims(s, rng, now)
		names := s.Tree.LevelNames()
		p := Preemptor{
			Gang: Gang{
				Members:       1 + int(members)%8,
				GPUsPerMember: 1 + int(gpus)%8,
				Level:         append([]string{""}, names...)[int(level)%(len(names)+1)],
				Mode:          []lockstep.ConstraintMode{lockstep.Required, lockstep.Preferred}[mode%2],
			},
			Priority:   2,
			Now:        now,
			MinRuntime: time.Duration(rng.IntN(3)) * time.Hour,
		}
		pre, err := Preempt(s, p, candidates)
		var none *NoPreemption
		switch {
		case errors.As(err, &none):
			checkNoPreemption(t, s, p, candidates)
			return
		case err != nil:
			t.Fatalf("Preempt: %v", err)
		}
		checkPreemption(t, s, p, candidates, pre)
		checkBudgetsBrokenLast(t, s, p, candidates, pre)
		var lost float64
		for _, v := range pre.Victims {
			started := v.Started
			if started.IsZero() {
				started = now
			}
			// The work lost is bounded by the run time and the restart
			// overhead, and a checkpoint never makes a victim protected.
			w := v.LostWork(now)
			if w < v.RestartOverhead || w > now.Sub(started)+v.RestartOverhead {
				t.Errorf("victim %s (started %s, checkpointed %s, overhead %s) loses %s", v.Key, started, v.Checkpointed, v.RestartOverhead, w)
			}
			lost += float64(v.GPUs()) * w.Seconds()
			if p.MinRuntime > 0 && now.Sub(started) < p.MinRuntime {
				t.Errorf("victim %s started %s ago, protected for %s", v.Key, now.Sub(started), p.MinRuntime)
			}
			// The reprieve spared every victim the plan could do without.
			rest := slices.DeleteFunc(slices.Clone(pre.Victims), func(o Victim) bool { return o.Key == v.Key })
			if fitsIn(s, p.Gang, pre.Plan.Domain, rest) {
				t.Errorf("victim %s could be spared: the gang fits in %s without it", v.Key, pre.Plan.Domain.ID)
			}
		}
		if math.Abs(lost-pre.Cost.GPUSeconds) > 1e-6*max(lost, 1) {
			t.Errorf("cost %f GPU-seconds, the victims lose %f", pre.Cost.GPUSeconds, lost)
		}
		shuffled := slices.Clone(candidates)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again, err := Preempt(s, p, shuffled)
		if err != nil || fmt.Sprint(victimKeys(again.Victims)) != fmt.Sprint(victimKeys(pre.Victims)) || again.Plan.Domain.ID != pre.Plan.Domain.ID {
			t.Errorf("candidates in another order: %v, %v; want victims %v in %s", err, again, victimKeys(pre.Victims), pre.Plan.Domain.ID)
		}
	})
}

// randomVictims hands every busy GPU of s (those of its topology not free)
// to random victims: runs of nodes form gangs, the rest single pods.
func randomVictims(s *Snapshot, rng *rand.Rand, now time.Time) []Victim {
	var out []Victim
	var open *Victim
	for _, n := range s.Nodes {
		if n.Topology == nil {
			continue
		}
		busy := n.Topology.AllGPUs() &^ n.FreeGPUs
		for busy != 0 {
			// Take a random non-empty part of what is busy.
			part := busy & topology.GPUSet(rng.Uint64())
			if part == 0 {
				part = busy
			}
			busy &^= part
			if open == nil || rng.IntN(3) == 0 {
				out = append(out, Victim{
					Key:      fmt.Sprintf("ns/v%02d", len(out)),
					Priority: int32(rng.IntN(4)),
					Started:  now.Add(-time.Duration(rng.IntN(5)) * time.Hour),
				})
				// One in four has pods a PodDisruptionBudget protects.
				if rng.IntN(4) == 0 {
					out[len(out)-1].PDBViolations = 1 + rng.IntN(2)
				}
				// Half report checkpoints: before their start (the one
				// they resumed from), while running, or on a clock ahead
				// of the scheduler's; some state a restart overhead.
				if rng.IntN(2) == 0 {
					out[len(out)-1].Checkpointed = now.Add(time.Duration(rng.IntN(7)-5) * time.Hour)
				}
				if rng.IntN(4) == 0 {
					out[len(out)-1].RestartOverhead = time.Duration(rng.IntN(3)) * 30 * time.Minute
				}
				open = &out[len(out)-1]
			}
			open.Pods = append(open.Pods, VictimPod{Node: n.Name, GPUs: part})
			// One gang member in eight is pending beside it (an elastic
			// job below its maximum, a scale-up): it frees nothing.
			if rng.IntN(8) == 0 {
				open.Pods = append(open.Pods, VictimPod{})
			}
		}
	}
	return out
}

// randomDRAOrder is a DRA allocator's order over gpus GPUs: a random
// permutation, each GPU on one of two PCIe roots.
func randomDRAOrder(rng *rand.Rand, gpus int) *topology.DRAOrder {
	order := rng.Perm(gpus)
	roots := make([]string, gpus)
	for i := range roots {
		roots[i] = []string{"pci0", "pci1"}[rng.IntN(2)]
	}
	return topology.NewDRAOrder(order, roots)
}

// fitsIn reports whether g fits in domain d with the victims' GPUs freed.
func fitsIn(s *Snapshot, g Gang, d *topology.Domain, victims []Victim) bool {
	sub := *s
	sub.Nodes = nil
	for _, n := range s.Nodes {
		if !slices.Contains(d.Nodes, n.Name) {
			continue
		}
		c := *n
		for _, v := range victims {
			for _, pod := range v.Pods {
				if pod.Node == n.Name {
					c.FreeGPUs |= pod.GPUs
				}
			}
		}
		sub.Nodes = append(sub.Nodes, &c)
	}
	g.Level, g.Mode, g.Widen = d.LevelName, lockstep.Required, len(s.Tree.LevelNames())
	_, err := Place(&sub, g, Options{})
	return err == nil
}

// checkNoPreemption checks that evicting every eligible candidate would not
// let the gang fit within its constraint, or that it fits already.
func checkNoPreemption(t *testing.T, s *Snapshot, p Preemptor, candidates []Victim) {
	t.Helper()
	var eligible []Victim
	for _, v := range candidates {
		started := v.Started
		if started.IsZero() {
			started = p.Now
		}
		if v.Priority < p.Priority && (p.MinRuntime == 0 || p.Now.Sub(started) >= p.MinRuntime) {
			eligible = append(eligible, v)
		}
	}
	// The domains the constraint allows at its widest: the gang fits in
	// one of them, without evicting anything or with every eligible victim
	// gone.
	domains := []*topology.Domain{s.Tree.Root()}
	if p.Gang.Level != "" && p.Gang.Mode == lockstep.Required {
		domains = s.Tree.Domains(slices.Index(s.Tree.LevelNames(), p.Gang.Level))
	}
	fitsAny := func(victims []Victim) bool {
		return slices.ContainsFunc(domains, func(d *topology.Domain) bool { return fitsIn(s, p.Gang, d, victims) })
	}
	if !fitsAny(nil) && fitsAny(eligible) {
		t.Error("no preemption, but evicting every eligible victim lets the gang fit within its constraint")
	}
}

func victimKeys(vs []Victim) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Key
	}
	return out
}

// checkBudgetsBrokenLast checks that a preemption breaks a
// PodDisruptionBudget only when nothing else makes room: at the level it
// freed a domain at, no domain takes the gang with every eligible
// candidate that breaks none evicted.
func checkBudgetsBrokenLast(t *testing.T, s *Snapshot, p Preemptor, candidates []Victim, pre *Preemption) {
	t.Helper()
	if pre.Cost.PDBViolations == 0 {
		return
	}
	var clean []Victim
	for _, v := range candidates {
		started := v.Started
		if started.IsZero() {
			started = p.Now
		}
		if v.PDBViolations == 0 && v.Priority < p.Priority && (p.MinRuntime == 0 || p.Now.Sub(started) >= p.MinRuntime) {
			clean = append(clean, v)
		}
	}
	level := slices.Index(s.Tree.LevelNames(), pre.Plan.Domain.LevelName)
	for _, d := range s.Tree.Domains(level) {
		if fitsIn(s, p.Gang, d, clean) {
			t.Errorf("broke %d budgets in %s, though the gang fits in %s evicting only work no budget protects", pre.Cost.PDBViolations, pre.Plan.Domain.ID, d.ID)
		}
	}
}
