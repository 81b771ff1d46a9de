package placement

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// victimPod names pod i of victim key, as the run directive does.
func victimPod(key string, i int) string { return fmt.Sprintf("%s#%d", key, i) }

// runVictim is the run directive.
func (s *script) runVictim(t *testing.T, d *datadriven.TestData) (string, error) {
	v := &Victim{Key: arg(t, d, "key", "")}
	if _, ok := s.victims[v.Key]; ok {
		return "", fmt.Errorf("%s already runs", v.Key)
	}
	d.MaybeScanArgs(t, "priority", &v.Priority)
	d.MaybeScanArgs(t, "pdb", &v.PDBViolations)
	if d.HasArg("started") {
		var at time.Duration
		d.ScanArgs(t, "started", &at)
		v.Started = time.Unix(0, 0).Add(at)
	}
	// The victim's last checkpoint, from the epoch, and its restart
	// overhead (Victim.LostWork).
	if d.HasArg("checkpointed") {
		var at time.Duration
		d.ScanArgs(t, "checkpointed", &at)
		v.Checkpointed = time.Unix(0, 0).Add(at)
	}
	d.MaybeScanArgs(t, "overhead", &v.RestartOverhead)
	// A gang's running members' starts, one per input line, as the
	// plugin reads them: members not listed are pending and hold nothing.
	var starts []time.Time
	minMember := 1
	if d.HasArg("starts") {
		if d.HasArg("started") {
			return "", errors.New("started and starts are exclusive")
		}
		var list []string
		d.ScanArgs(t, "starts", &list)
		d.MaybeScanArgs(t, "minmember", &minMember)
		for _, s := range list {
			at, err := time.ParseDuration(s)
			if err != nil {
				return "", fmt.Errorf("starts: %w", err)
			}
			starts = append(starts, time.Unix(0, 0).Add(at))
		}
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		name, list, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, ok := s.node(name)
		if !ok {
			return "", fmt.Errorf("line %q: no such node", line)
		}
		set, err := parseGPUs(strings.TrimSpace(list))
		if err != nil {
			return "", fmt.Errorf("line %q: %w", line, err)
		}
		if set&^n.node.FreeGPUs != 0 {
			return "", fmt.Errorf("line %q: gpus %s are not free on %s (%s)", line, gpuList(set), name, gpuList(n.node.FreeGPUs))
		}
		n.node.FreeGPUs &^= set
		v.Pods = append(v.Pods, VictimPod{Node: name, GPUs: set})
		fmt.Fprintf(&b, "%s: %s gpus %s\n", victimPod(v.Key, len(v.Pods)-1), name, gpuList(set))
	}
	if starts != nil {
		if len(starts) != len(v.Pods) {
			return "", fmt.Errorf("starts: %d for %d running pods, want one each", len(starts), len(v.Pods))
		}
		v.Started = GangStarted(starts, minMember)
	}
	s.victims[v.Key] = v
	return b.String(), nil
}

// preempt is the preempt directive.
func (s *script) preempt(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "gang", "")
	p := Preemptor{Gang: Gang{Level: arg(t, d, "level", ""), Mode: lockstep.ConstraintMode(arg(t, d, "mode", ""))}, Now: timeArg(t, d)}
	d.ScanArgs(t, "members", &p.Gang.Members)
	scanMemberRequests(t, d, &p.Gang.GPUsPerMember, &p.Gang.MilliCPUPerMember, &p.Gang.MemoryPerMember)
	p.Gang.Implicit = d.HasArg("implicit")
	if p.Gang.Implicit {
		p.Gang.Level, p.Gang.Mode = lockstep.LevelHost, lockstep.Preferred
	}
	d.MaybeScanArgs(t, "near", &p.Gang.Near)
	d.MaybeScanArgs(t, "priority", &p.Priority)
	d.MaybeScanArgs(t, "minruntime", &p.MinRuntime)
	snap, err := s.snapshot(key, p.Priority)
	if err != nil {
		return "", err
	}
	// As the plugin: the nodes held for other preemptions it outranks.
	for _, n := range s.nodes {
		if by, q := s.books.PreemptedFor(n.node.Name); by != "" && by != key && q < p.Priority {
			if p.Held == nil {
				p.Held = map[string]int32{}
			}
			p.Held[n.node.Name] = q
		}
	}
	var b strings.Builder
	candidates := make([]Victim, 0, len(s.victims))
	for _, k := range slices.Sorted(maps.Keys(s.victims)) {
		// As the plugin: work already evicted for a hold is leaving, and is
		// never evicted twice.
		if by, ok := s.books.EvictedFor(victimPod(k, 0)); ok {
			fmt.Fprintf(&b, "%s: evicted for %s already\n", k, by)
			continue
		}
		candidates = append(candidates, *s.victims[k])
	}
	pre, err := Preempt(snap, p, candidates)
	var none *NoPreemption
	switch {
	case errors.As(err, &none):
		return b.String() + "no preemption: " + none.Reason, nil
	case err != nil:
		return b.String() + "error: " + err.Error(), nil
	}
	checkPreemption(t, snap, p, candidates, pre)
	for _, v := range pre.Victims {
		fmt.Fprintf(&b, "evict %s (priority %d, %d pods)\n", v.Key, v.Priority, len(v.Pods))
	}
	if pre.Cost.PDBViolations > 0 {
		fmt.Fprintf(&b, "cost: %d pods against a PodDisruptionBudget, ", pre.Cost.PDBViolations)
	} else {
		b.WriteString("cost: ")
	}
	fmt.Fprintf(&b, "max priority %d, %.4g GPU-hours, %d victims\n", pre.Cost.MaxPriority, pre.Cost.GPUSeconds/3600, pre.Cost.Victims)
	b.WriteString(describePlan(key, pre.Plan))
	if d.HasArg("hold") {
		var pods []string
		for _, v := range pre.Victims {
			for i := range v.Pods {
				pods = append(pods, victimPod(v.Key, i))
			}
		}
		released, ok := s.books.Hold(key, pre.Plan.Domain, p.Priority, pods, p.Now)
		switch {
		case !ok:
			fmt.Fprintf(&b, "cannot hold %s\n", pre.Plan.Domain.DisplayID())
		case len(released) > 0:
			fmt.Fprintf(&b, "holds %s; released the drains of %s\n", pre.Plan.Domain.DisplayID(), strings.Join(released, ", "))
		default:
			fmt.Fprintf(&b, "holds %s\n", pre.Plan.Domain.DisplayID())
		}
	}
	return b.String(), nil
}

// checkPreemption checks what every preemption must satisfy, whatever the
// case expects: victims are whole candidates of lower priority, and the
// plan fits on the snapshot with their GPUs freed.
func checkPreemption(t *testing.T, snap *Snapshot, p Preemptor, candidates []Victim, pre *Preemption) {
	t.Helper()
	freed := *snap
	freed.Nodes = nil
	for _, n := range snap.Nodes {
		c := *n
		freed.Nodes = append(freed.Nodes, &c)
	}
	for _, v := range pre.Victims {
		i := slices.IndexFunc(candidates, func(c Victim) bool { return c.Key == v.Key })
		if i < 0 || len(candidates[i].Pods) != len(v.Pods) {
			t.Errorf("victim %s is not a whole candidate", v.Key)
			continue
		}
		if v.Priority >= p.Priority {
			t.Errorf("victim %s has priority %d, the preemptor %d", v.Key, v.Priority, p.Priority)
		}
		for _, pod := range v.Pods {
			for _, n := range freed.Nodes {
				if n.Name == pod.Node {
					n.FreeGPUs |= pod.GPUs
				}
			}
		}
	}
	checkPlan(t, &freed, p.Gang, pre.Plan)
}

// evict is the evict directive.
func (s *script) evict(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "key", "")
	v, ok := s.victims[key]
	if !ok {
		return "", fmt.Errorf("%s does not run", key)
	}
	delete(s.victims, key)
	var b strings.Builder
	for i, pod := range v.Pods {
		if n, ok := s.node(pod.Node); ok {
			n.node.FreeGPUs |= pod.GPUs
		}
		if gang, last := s.books.VictimGone(victimPod(key, i), timeArg(t, d)); last {
			fmt.Fprintf(&b, "last victim of %s gone\n", gang)
		}
	}
	fmt.Fprintf(&b, "evicted %s", key)
	return b.String(), nil
}
