package placement

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// TestDataDriven runs the scripts of testdata/*.txt: the gang core (Place
// and Books) driven the way the scheduler plugin drives it, one event at a
// time. Each script is a list of directives in the cockroachdb/datadriven
// format, a directive followed by its input, "----" and the expected output;
// every case is a "subtest" that starts with a topology. Rewrite the
// expected output after a deliberate change with
//
//	go test ./pkg/topology/placement/ -run TestDataDriven -rewrite
//
// and review the diff. The directives:
//
//	topology [levels=(clique,leaf,spine,block)]
//	  one line per group of nodes:
//	  nodes=n1..n4 | nodes=n1            names: a numbered range or one node
//	  profile=hgx-h100                   a built-in profile; none (the
//	                                     default) is a node without topology
//	                                     with gpus=N GPUs (default 8)
//	  free=8,8,4,0 | free=4              free GPUs per node (lowest indices),
//	                                     or one count for all; default all
//	  freegpus=0,1,4-5                   the free GPU indices of every node
//	  clique=1 leaf=l1 spine=s1 block=b1 level labels (clique: a GB200
//	                                     NVLink clique number)
//	  cpu=4000 mem=64 pods=2             free millicores, GiB and pod slots
//	  starts afresh: new nodes and empty books.
//	place gang=ns/b members=4 gpus=8 [cpu=m] [mem=GiB] [level=leaf]
//	      [mode=Required|Preferred] [widen=N] [implicit] [now=30s] [ranked]
//	      [priority=N]
//	  plans the gang on the free GPUs net of what the books hold for other
//	  gangs (Books.HeldOn, as the plugin's snapshot does) and, if it fits,
//	  adds the plan to the books; prints the plan or why it does not fit.
//	  ranked puts the members in rank order (RankOrder) first, as the
//	  plugin does. A gang that does not fit drains the domain Place names
//	  (Books.Drain) from now, and releases it when
//	  Place names none; planning sees the nodes drained for other gangs as
//	  Node.Drained unless the gang's priority (default 0) is higher than
//	  theirs (Books.KeptOff). As the plugin, a gang whose drain stalled less than
//	  drainStall ago drains nothing (Gang.NoDrain, Books.Stalled).
//	decide gang=ns/b members=4 [needed=N] gpus=8 [cpu=m] [mem=GiB]
//	       [level=leaf] [mode=Required|Preferred|...] [first=0s] [now=30s]
//	       [anywhere] [near=(n1,n2)] [priority=N]
//	  one attempt at the gang as the plugin makes it (Decide): its drain
//	  ends first if it stalled (Books.ExpireDrain); its Wait is read from
//	  the books at now, first attempted at first; the policy is the
//	  plugin's defaults (Preferred, TightestFirst unless anywhere, a
//	  preferredWait of drainStall/8). Prints the verdict, the gang as
//	  planned, and what the plugin records: the plan (Books.Add), or the
//	  drain (Books.Drain) and when to retry (Policy.NextWiden).
//	hold gang=ns/a [now=0s]
//	  adds an explicit plan, one member per input line "n1 0-3".
//	reserve gang=ns/b [pod=p node=n [slot=i]]
//	  gives pod a slot on node (Books.ReserveSlot with slot i, its rank's
//	  slot; -1 for a pod without a rank); without pod and node every open
//	  slot is reserved, for pods named after the gang and the member index.
//	unreserve gang=ns/b     drops the plan (a member failed at Permit)
//	forget pod=(p1,p2)      the pods are gone: their GPUs are free again
//	report pod=p [node=n] [gpus=4-7]
//	                        the node's agent reports pod holding gpus (default:
//	                        the GPUs the books gave it), as the device plugin
//	                        chose them: they leave the node's free GPUs and
//	                        replace the scheduler's choice in the books
//	                        (Books.Report); node defaults to the pod's in the
//	                        books
//	single pod=p node=n gpus=k [priority=N]
//	                        a GPU pod outside gangs takes the best k GPUs
//	                        (none on a node drained for a gang of its
//	                        priority or higher)
//	set-free node=n free=k  other pods took GPUs: k stay free
//	node-gone node=n        the node is deleted
//	validate                drops the plans that no longer fit (Held.Fits)
//	expire now=10m ttl=5m   drops the incomplete plans older than ttl
//	expire-drains now=1m    ends the drains that freed no GPU for
//	                        drainStall (ExpireDrains)
//	books                   dumps the books (Books.String)
//	run key=ns/v priority=N [started=-10m]
//	  lower-priority work to preempt: one pod per input line "n1 0-7"
//	  (pods named key#0, key#1, ...) takes those GPUs off its node's free
//	  GPUs; a key with one line and started= omitted for a pod that has
//	  not started. started is relative to the epoch (now=0).
//	run key=ns/v priority=N starts=(0s,10m) [minmember=2]
//	  a gang with pending members: starts are its running members'
//	  (one per input line); it started when its minmember-th did
//	  (GangStarted), and never when fewer run.
//	preempt gang=ns/x members=4 gpus=8 [level=leaf] [mode=...] [implicit]
//	        [priority=N] [now=1h] [minruntime=30m] [near=(n1)] [hold]
//	  Preempt over the work run so far (not evicted): prints the victims,
//	  their cost and the plan, or why nothing is evicted. hold records the
//	  preemption in the books (Books.Hold with the victims' pods) and
//	  evicts nothing yet; the snapshot sees drains and holds of gangs the
//	  preemptor does not outrank as drained, and taking over another
//	  gang's hold costs as a victim of its priority (Preemptor.Held), as
//	  in the plugin.
//	evict key=ns/v [now=0s]
//	  the victim's pods are gone: their GPUs are free again, and each is
//	  reported to the books (Books.VictimGone)
//
// drainStall is how long a drain in the scripts may go without freeing a
// GPU (expire-drains): eight deployed preferredWaits, as the plugin bounds
// it.
const drainStall = 4 * time.Minute

func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			s := &script{selectors: map[string]*topology.Selector{}}
			datadriven.RunTest(t, file, func(t *testing.T, d *datadriven.TestData) string {
				out, err := s.run(t, d)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				if out != "" && !strings.HasSuffix(out, "\n") {
					out += "\n"
				}
				return out
			})
		})
	}
}

// script is the world a data-driven script changes: nodes with the GPUs
// their agents report free, and the books.
type script struct {
	// victims is the work run (the run directive) not evicted, by key.
	victims   map[string]*Victim
	levels    []topology.Level
	nodes     []*scriptNode
	books     *Books
	selectors map[string]*topology.Selector
}

type scriptNode struct {
	node    Node // FreeGPUs: what the agent reports free
	labels  map[string]string
	profile string
}

func (s *script) node(name string) (*scriptNode, bool) {
	for _, n := range s.nodes {
		if n.node.Name == name {
			return n, true
		}
	}
	return nil, false
}

func (s *script) run(t *testing.T, d *datadriven.TestData) (string, error) {
	if d.Cmd != "topology" && s.books == nil {
		return "", errors.New("a script starts with topology")
	}
	switch d.Cmd {
	case "topology":
		return s.topology(d)
	case "place":
		return s.place(t, d)
	case "decide":
		return s.decide(t, d)
	case "hold":
		return s.hold(t, d)
	case "reserve":
		return s.reserve(t, d)
	case "unreserve":
		// As the plugin's Unreserve: the pod forgets its GPUs and the plan
		// is dropped; the other members keep theirs until forgotten.
		key := arg(t, d, "gang", "")
		if d.HasArg("pod") {
			var pod string
			d.ScanArgs(t, "pod", &pod)
			s.books.ForgetPod(pod)
		}
		if !s.books.Drop(key) {
			return "no plan for " + key, nil
		}
		return "dropped " + key, nil
	case "forget":
		var pods []string
		d.ScanArgs(t, "pod", &pods)
		var b strings.Builder
		for _, pod := range pods {
			r, ok := s.books.Reservation(pod)
			if !ok {
				fmt.Fprintf(&b, "pod %s: not in the books\n", pod)
				continue
			}
			s.books.ForgetPod(pod)
			fmt.Fprintf(&b, "pod %s: forgot %s gpus %s\n", pod, r.Node, gpuList(r.GPUs))
		}
		return b.String(), nil
	case "report":
		return s.report(t, d)
	case "single":
		return s.single(t, d)
	case "set-free":
		n, ok := s.node(arg(t, d, "node", ""))
		if !ok {
			return "", errors.New("no such node")
		}
		var free int
		d.ScanArgs(t, "free", &free)
		n.node.FreeGPUs = lowest(n.node.FreeGPUs, free)
		return fmt.Sprintf("%s: free %s", n.node.Name, gpuList(n.node.FreeGPUs)), nil
	case "node-gone":
		name := arg(t, d, "node", "")
		i := slices.IndexFunc(s.nodes, func(n *scriptNode) bool { return n.node.Name == name })
		if i < 0 {
			return "", errors.New("no such node")
		}
		s.nodes = slices.Delete(s.nodes, i, i+1)
		// As the plugin: every plan is checked (Held.Fits) when its next
		// member comes; here at once.
		return s.validate(slices.Sorted(maps.Keys(s.books.gangs))), nil
	case "validate":
		return s.validate(slices.Sorted(maps.Keys(s.books.gangs))), nil
	case "expire":
		var ttl time.Duration
		d.ScanArgs(t, "ttl", &ttl)
		return dropEach(s.books.Expired(timeArg(t, d), ttl), s.books.Drop, "nothing expired", "expired %s"), nil
	case "expire-drains":
		now := timeArg(t, d)
		keys := s.books.ExpireDrains(now, drainStall)
		if len(keys) == 0 {
			return "no drain expired", nil
		}
		var b strings.Builder
		for _, key := range keys {
			fmt.Fprintf(&b, "expired the drain of %s; stalled: %v\n", key, s.books.Stalled(key, now, drainStall))
		}
		return b.String(), nil
	case "bound-hold":
		// The hold stops waiting for its victims at now (BoundHold).
		key, now := arg(t, d, "gang", ""), timeArg(t, d)
		if !s.books.BoundHold(key, now) {
			return fmt.Sprintf("%s holds nothing it preempted for", key), nil
		}
		return fmt.Sprintf("%s waits for %s until %s", key, strings.Join(s.books.VictimsOf(key), ","), now.Sub(time.Unix(0, 0))), nil
	case "overdue":
		key, now := arg(t, d, "gang", ""), timeArg(t, d)
		if stuck := s.books.Overdue(key, now); len(stuck) > 0 {
			return fmt.Sprintf("%s waited past its bound for %s", key, strings.Join(stuck, ",")), nil
		}
		return fmt.Sprintf("%s is within its bound", key), nil
	case "evicted-for":
		pod := arg(t, d, "pod", "")
		if key, ok := s.books.EvictedFor(pod); ok {
			return fmt.Sprintf("%s stays evicted for %s", pod, key), nil
		}
		return fmt.Sprintf("%s is no victim", pod), nil
	case "books":
		return s.books.String(), nil
	case "run":
		return s.runVictim(t, d)
	case "preempt":
		return s.preempt(t, d)
	case "evict":
		return s.evict(t, d)
	}
	return "", fmt.Errorf("unknown directive %q", d.Cmd)
}

// topology builds the nodes from the input lines and empties the books.
func (s *script) topology(d *datadriven.TestData) (string, error) {
	s.levels = lockstep.DefaultLevels()
	if arg, ok := d.Arg("levels"); ok {
		s.levels = nil
		for _, name := range arg.Vals {
			s.levels = append(s.levels, topology.Level{Name: name, LabelKey: "test/" + name})
			for _, l := range lockstep.DefaultLevels() {
				if l.Name == name {
					s.levels[len(s.levels)-1] = l
				}
			}
		}
	}
	s.nodes, s.books, s.victims = nil, NewBooks(), map[string]*Victim{}
	var b strings.Builder
	for _, line := range strings.Split(d.Input, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		nodes, err := s.nodeLine(line)
		if err != nil {
			return "", fmt.Errorf("line %q: %w", line, err)
		}
		for _, n := range nodes {
			what := n.profile
			if what == "" {
				what = "no topology"
			}
			fmt.Fprintf(&b, "%s: %s, %s, free %s\n", n.node.Name, what, s.where(n), gpuList(n.node.FreeGPUs))
		}
		s.nodes = append(s.nodes, nodes...)
	}
	if _, err := s.snapshot("", 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

// where lists a node's level labels, widest first: "spine=s1 leaf=l1".
func (s *script) where(n *scriptNode) string {
	var parts []string
	for i := len(s.levels) - 1; i >= 0; i-- {
		l := s.levels[i]
		if v := n.labels[l.LabelKey]; v != "" {
			if l.Name == lockstep.LevelClique {
				v = strings.TrimPrefix(v, "rack.")
			}
			parts = append(parts, l.Name+"="+v)
		}
	}
	if len(parts) == 0 {
		return "no labels"
	}
	return strings.Join(parts, " ")
}

func (s *script) nodeLine(line string) ([]*scriptNode, error) {
	fields := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", f)
		}
		fields[k] = v
	}
	names, err := expandNames(fields["nodes"])
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for _, l := range s.levels {
		if v, ok := fields[l.Name]; ok {
			labels[l.LabelKey] = v
		}
	}
	var out []*scriptNode
	for i, name := range names {
		n := &scriptNode{
			node:    Node{Name: name, FreeMilliCPU: 64_000, FreeMemory: 512 << 30, FreePods: 110},
			labels:  map[string]string{},
			profile: fields["profile"],
		}
		for k, v := range labels {
			n.labels[k] = v
		}
		gpus := 8
		if n.profile != "" {
			p, ok := topology.LookupProfile(n.profile)
			if !ok {
				return nil, fmt.Errorf("no profile %q (%v)", n.profile, topology.ProfileNames())
			}
			node, err := p.Node()
			if err != nil {
				return nil, err
			}
			sel, ok := s.selectors[p.Name]
			if !ok {
				if sel, err = topology.NewSelector(node); err != nil {
					return nil, err
				}
				s.selectors[p.Name] = sel
			}
			n.node.Topology, n.node.Selector, gpus = node, sel, p.GPUCount
			if nv := node.NVLinkDomain; nv != nil && fields["clique"] != "" {
				id, err := strconv.ParseUint(fields["clique"], 10, 32)
				if err != nil {
					return nil, fmt.Errorf("clique %q is not a number", fields["clique"])
				}
				nv.ClusterUUID, nv.CliqueID = "rack", uint32(id)
				n.labels[lockstep.LabelGPUClique] = nv.Label()
			}
		} else if v, ok := fields["gpus"]; ok {
			if gpus, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
		n.node.FreeGPUs = topology.AllGPUs(gpus)
		if v, ok := fields["free"]; ok {
			counts := strings.Split(v, ",")
			if len(counts) != 1 && len(counts) != len(names) {
				return nil, fmt.Errorf("free has %d counts for %d nodes", len(counts), len(names))
			}
			c, err := strconv.Atoi(counts[min(i, len(counts)-1)])
			if err != nil {
				return nil, err
			}
			n.node.FreeGPUs = lowest(n.node.FreeGPUs, c)
		}
		if v, ok := fields["freegpus"]; ok {
			set, err := parseGPUs(v)
			if err != nil {
				return nil, err
			}
			n.node.FreeGPUs = set
		}
		for key, dst := range map[string]*int64{"cpu": &n.node.FreeMilliCPU, "mem": &n.node.FreeMemory} {
			if v, ok := fields[key]; ok {
				x, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, err
				}
				if key == "mem" {
					x <<= 30
				}
				*dst = x
			}
		}
		if v, ok := fields["pods"]; ok {
			if n.node.FreePods, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// snapshot is the planner's view for gang except: every node, its free
// GPUs net of what the books hold for other gangs and give reserved pods.
func (s *script) snapshot(except string, priority int32) (*Snapshot, error) {
	labels := make([]topology.NodeLabels, len(s.nodes))
	snap := &Snapshot{Levels: s.levels, Nodes: make([]*Node, len(s.nodes))}
	for i, n := range s.nodes {
		labels[i] = topology.NodeLabels{Name: n.node.Name, Labels: n.labels}
		node := n.node
		node.FreeGPUs &^= s.books.HeldOn(node.Name, except)
		node.Drained = s.books.KeptOff(node.Name, except, priority) != ""
		snap.Nodes[i] = &node
	}
	tree, err := topology.NewTree(s.levels, labels)
	if err != nil {
		return nil, err
	}
	snap.Tree = tree
	return snap, nil
}

// scanMemberRequests reads what each member asks for: gpus, cpu
// (millicores) and mem (GiB), each optional.
func scanMemberRequests(t *testing.T, d *datadriven.TestData, gpus *int, milliCPU, memory *int64) {
	d.MaybeScanArgs(t, "gpus", gpus)
	d.MaybeScanArgs(t, "cpu", milliCPU)
	if d.MaybeScanArgs(t, "mem", memory) {
		*memory <<= 30
	}
}

func (s *script) place(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "gang", "")
	g := Gang{Level: arg(t, d, "level", ""), Mode: lockstep.ConstraintMode(arg(t, d, "mode", ""))}
	d.ScanArgs(t, "members", &g.Members)
	scanMemberRequests(t, d, &g.GPUsPerMember, &g.MilliCPUPerMember, &g.MemoryPerMember)
	d.MaybeScanArgs(t, "widen", &g.Widen)
	g.Implicit = d.HasArg("implicit")
	g.NoDrain = s.books.Stalled(key, timeArg(t, d), drainStall)
	var priority int32
	d.MaybeScanArgs(t, "priority", &priority)
	snap, err := s.snapshot(key, priority)
	if err != nil {
		return "", err
	}
	plan, err := Place(snap, g, Options{})
	var u *Unschedulable
	switch {
	case errors.As(err, &u):
		out := "unschedulable: " + u.Reason
		if u.WiderLevel != "" {
			out += "\nwould fit at: " + u.WiderLevel
		}
		switch {
		case u.Drain == nil:
			if s.books.Undrain(key) {
				out += "\nreleased its drain"
			}
		case s.books.Drain(key, u.Drain, priority, u.DrainFree, timeArg(t, d)):
			out += fmt.Sprintf("\ndrains: %s, %s free", u.Drain.DisplayID(), plural(u.DrainFree, "GPU"))
		default:
			out += "\ncannot drain " + u.Drain.DisplayID()
		}
		return out, nil
	case err != nil:
		return "error: " + err.Error(), nil
	}
	checkPlan(t, snap, g, plan)
	if d.HasArg("ranked") {
		RankOrder(snap.Tree, plan, func(name string) *topology.NodeTopology {
			n, _ := s.node(name)
			return n.node.Topology
		})
	}
	s.books.Add(key, plan, timeArg(t, d))
	return describePlan(key, plan), nil
}

// decide is the decide directive.
func (s *script) decide(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "gang", "")
	r := Request{Level: arg(t, d, "level", ""), Mode: lockstep.ConstraintMode(arg(t, d, "mode", ""))}
	d.ScanArgs(t, "members", &r.Pending)
	r.Needed = r.Pending
	d.MaybeScanArgs(t, "needed", &r.Needed)
	scanMemberRequests(t, d, &r.GPUsPerMember, &r.MilliCPUPerMember, &r.MemoryPerMember)
	d.MaybeScanArgs(t, "near", &r.Near)
	var first time.Duration
	d.MaybeScanArgs(t, "first", &first)
	var priority int32
	d.MaybeScanArgs(t, "priority", &priority)
	now := timeArg(t, d)
	policy := Policy{
		Topology:      lockstep.TopologyConfig{Levels: s.levels},
		DefaultMode:   lockstep.Preferred,
		TightestFirst: !d.HasArg("anywhere"),
		PreferredWait: drainStall / 8,
	}
	wait := func() Wait {
		w := Wait{Waited: now.Sub(time.Unix(0, 0).Add(first)), Stalled: s.books.Stalled(key, now, drainStall)}
		if hold, ok := s.books.DrainHeld(key, now, drainStall); ok {
			w.Held, w.HoldLeft = true, hold.Sub(now)
		}
		return w
	}
	var b strings.Builder
	if s.books.ExpireDrain(key, now, drainStall) {
		b.WriteString("its drain stalled: released\n")
	}
	r.Wait = wait()
	snap, err := s.snapshot(key, priority)
	if err != nil {
		return "", err
	}
	dec := Decide(snap, r, policy)
	if dec.Verdict != Refused {
		g := dec.Gang
		fmt.Fprintf(&b, "gang: %d x %d GPUs, level %q mode %q widen %d", g.Members, g.GPUsPerMember, g.Level, g.Mode, g.Widen)
		for _, flag := range []struct {
			set  bool
			name string
		}{{g.Implicit, "implicit"}, {g.NoDrain, "no drain"}, {dec.Fallback, "what minMember needs"}} {
			if flag.set {
				b.WriteString(", " + flag.name)
			}
		}
		b.WriteString("\n")
	}
	switch dec.Verdict {
	case Refused:
		fmt.Fprintf(&b, "refused: %s", dec.Reason)
	case Failed:
		fmt.Fprintf(&b, "failed: %s", dec.Reason)
	case Waiting:
		fmt.Fprintf(&b, "waiting: %s", dec.Reason)
		if dec.Drain != nil {
			if s.books.Drain(key, dec.Drain, priority, dec.DrainFree, now) {
				fmt.Fprintf(&b, "\ndrains: %s, %s free", dec.Drain.DisplayID(), plural(dec.DrainFree, "GPU"))
			} else {
				b.WriteString("\ncannot drain " + dec.Drain.DisplayID())
			}
		}
		if dec.Retry {
			fmt.Fprintf(&b, "\nretry in %v", policy.NextWiden(wait()))
		}
	case Planned:
		checkPlan(t, snap, dec.Gang, dec.Plan)
		s.books.Add(key, dec.Plan, now)
		b.WriteString(describePlan(key, dec.Plan))
	}
	return b.String(), nil
}

func describePlan(key string, plan *Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s: %s\n", key, domainName(plan))
	for i, m := range plan.Members {
		fmt.Fprintf(&b, "  member %d: %s gpus %s\n", i, m.Node, gpuList(m.GPUs))
	}
	return b.String()
}

// checkPlan checks what every plan must satisfy, whatever the case expects:
// one member per entry, each member's GPUs free and disjoint, the domain
// holding every member.
func checkPlan(t *testing.T, s *Snapshot, g Gang, plan *Plan) {
	t.Helper()
	if len(plan.Members) != g.Members {
		t.Errorf("plan has %d members, want %d", len(plan.Members), g.Members)
	}
	used := map[string]topology.GPUSet{}
	for i, m := range plan.Members {
		n := s.Nodes[slices.IndexFunc(s.Nodes, func(n *Node) bool { return n.Name == m.Node })]
		if m.GPUs.Len() != g.GPUsPerMember || m.GPUs&^n.FreeGPUs != 0 || m.GPUs&used[m.Node] != 0 {
			t.Errorf("member %d: gpus %v on %s are not %d free GPUs of its own (free %v)", i, m.GPUs, m.Node, g.GPUsPerMember, n.FreeGPUs)
		}
		used[m.Node] |= m.GPUs
		if !slices.Contains(plan.Domain.Nodes, m.Node) {
			t.Errorf("member %d on %s is outside domain %s", i, m.Node, plan.Domain.ID)
		}
	}
	// A DRA allocator does not read the plan: the members on a DRA node get
	// the devices it gives their claims one after another from what is
	// free, so the plan's sets there must be those picks (in whichever
	// order the members' claims are allocated).
	for _, n := range s.Nodes {
		if n.DRA == nil {
			continue
		}
		var got, want []topology.GPUSet
		left := n.FreeGPUs
		for _, m := range plan.Members {
			if m.Node != n.Name {
				continue
			}
			got = append(got, m.GPUs)
			pick, _ := n.DRA.Pick(left, g.GPUsPerMember, n.DRAOneRoot)
			want = append(want, pick)
			left &^= pick
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("DRA node %s: members' GPUs %v, want the allocator's picks %v", n.Name, got, want)
		}
	}
}

func (s *script) hold(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "gang", "")
	plan := &Plan{}
	var nodes []string
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		name, list, _ := strings.Cut(strings.TrimSpace(line), " ")
		set, err := parseGPUs(strings.TrimSpace(list))
		if err != nil {
			return "", fmt.Errorf("line %q: %w", line, err)
		}
		plan.Members = append(plan.Members, Assignment{Node: name, GPUs: set})
		nodes = append(nodes, name)
	}
	snap, err := s.snapshot(key, 0)
	if err != nil {
		return "", err
	}
	if plan.Domain, err = snap.Tree.LowestCommonDomain(nodes); err != nil {
		return "", err
	}
	plan.LevelName = plan.Domain.LevelName
	s.books.Add(key, plan, timeArg(t, d))
	return describePlan(key, plan), nil
}

// noSlot marks a reserve directive without slot=: Books.Reserve, as
// before ranks.
const noSlot = -2

func (s *script) reserve(t *testing.T, d *datadriven.TestData) (string, error) {
	key := arg(t, d, "gang", "")
	h, ok := s.books.Get(key)
	if !ok {
		return "no plan for " + key, nil
	}
	type want struct {
		pod, node string
		slot      int
	}
	var wants []want
	if d.HasArg("pod") {
		w := want{arg(t, d, "pod", ""), arg(t, d, "node", ""), 0}
		if !d.MaybeScanArgs(t, "slot", &w.slot) {
			w.slot = noSlot
		}
		wants = append(wants, w)
	} else {
		_, name, _ := strings.Cut(key, "/")
		for i, m := range h.Plan().Members {
			if h.Slot(i) == "" {
				wants = append(wants, want{fmt.Sprintf("%s-%d", name, i), m.Node, noSlot})
			}
		}
	}
	var b strings.Builder
	for _, w := range wants {
		var gpus topology.GPUSet
		var ok bool
		if w.slot == noSlot {
			gpus, ok = s.books.Reserve(key, w.pod, w.node)
		} else {
			var r Reservation
			r, ok = s.books.ReserveSlot(key, w.pod, w.node, w.slot)
			gpus = r.GPUs
			if ok {
				fmt.Fprintf(&b, "pod %s: slot %d, ", w.pod, r.Slot)
			}
		}
		if !ok {
			fmt.Fprintf(&b, "pod %s: no open slot on %s\n", w.pod, w.node)
			continue
		}
		if w.slot == noSlot {
			fmt.Fprintf(&b, "pod %s: ", w.pod)
		}
		fmt.Fprintf(&b, "%s gpus %s\n", w.node, gpuList(gpus))
	}
	if h.Complete() {
		b.WriteString("gang complete\n")
	}
	return b.String(), nil
}

// single is the plugin's reserveBestSet: a GPU pod outside gangs takes the
// node's best set of what neither agents nor the books account for.
func (s *script) single(t *testing.T, d *datadriven.TestData) (string, error) {
	pod, name := arg(t, d, "pod", ""), arg(t, d, "node", "")
	var k int
	d.ScanArgs(t, "gpus", &k)
	n, ok := s.node(name)
	if !ok {
		return "", errors.New("no such node")
	}
	var priority int32
	d.MaybeScanArgs(t, "priority", &priority)
	if by := s.books.KeptOff(name, "", priority); by != "" {
		return fmt.Sprintf("pod %s: %s is drained for %s", pod, name, by), nil
	}
	free := n.node.FreeGPUs &^ s.books.HeldOn(name, "")
	set, _, ok := pickGPUs(&n.node, free, k)
	if !ok {
		return fmt.Sprintf("pod %s: %d GPUs do not fit in %s", pod, k, gpuList(free)), nil
	}
	s.books.Assign(pod, name, set)
	return fmt.Sprintf("pod %s: %s gpus %s", pod, name, gpuList(set)), nil
}

// validate drops the plans among keys whose open slots no longer fit: a
// node is gone, or has fewer free GPUs than its open slots need.
func (s *script) validate(keys []string) string {
	var b strings.Builder
	for _, key := range keys {
		h, _ := s.books.Get(key)
		fits := h.Fits(func(name string) (int, bool) {
			n, ok := s.node(name)
			if !ok {
				return 0, false
			}
			return (n.node.FreeGPUs &^ s.books.HeldOn(name, key)).Len(), true
		})
		if !fits {
			s.books.Drop(key)
			fmt.Fprintf(&b, "invalidated %s\n", key)
		}
	}
	if b.Len() == 0 {
		return "every plan still fits"
	}
	return b.String()
}

// report is the report directive: the agent's allocation for one pod.
func (s *script) report(t *testing.T, d *datadriven.TestData) (string, error) {
	pod := arg(t, d, "pod", "")
	r, known := s.books.Reservation(pod)
	node := arg(t, d, "node", r.Node)
	n, ok := s.node(node)
	if !ok {
		return "", fmt.Errorf("no such node %q", node)
	}
	gpus := r.GPUs
	if d.HasArg("gpus") {
		var err error
		if gpus, err = topology.ParseGPUList(arg(t, d, "gpus", "")); err != nil {
			return "", err
		}
	}
	n.node.FreeGPUs &^= gpus
	changed := s.books.Report(pod, node, gpus)
	switch {
	case !known:
		return fmt.Sprintf("pod %s: not in the books; %s free %s", pod, node, gpuList(n.node.FreeGPUs)), nil
	case !changed:
		return fmt.Sprintf("pod %s: books unchanged; %s free %s", pod, node, gpuList(n.node.FreeGPUs)), nil
	}
	return fmt.Sprintf("pod %s: %s gpus %s, was %s; %s free %s", pod, node, gpuList(gpus), gpuList(r.GPUs), node, gpuList(n.node.FreeGPUs)), nil
}

func arg(t *testing.T, d *datadriven.TestData, key, def string) string {
	if !d.HasArg(key) {
		return def
	}
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

// timeArg reads now=<duration since the epoch>; 0 when absent.
// dropEach drops each key and lists them with format, or says none.
func dropEach(keys []string, drop func(string) bool, none, format string) string {
	if len(keys) == 0 {
		return none
	}
	var b strings.Builder
	for _, key := range keys {
		drop(key)
		fmt.Fprintf(&b, format+"\n", key)
	}
	return b.String()
}

func timeArg(t *testing.T, d *datadriven.TestData) time.Time {
	var since time.Duration
	d.MaybeScanArgs(t, "now", &since)
	return time.Unix(0, 0).Add(since)
}

// lowest keeps the lowest k GPUs of set.
func lowest(set topology.GPUSet, k int) topology.GPUSet {
	var out topology.GPUSet
	for rest := set; rest != 0 && out.Len() < k; rest &= rest - 1 {
		out |= rest & -rest
	}
	return out
}

// parseGPUs reads a list written by gpuList: "0-3,6"; "none" is empty.
func parseGPUs(list string) (topology.GPUSet, error) {
	var set topology.GPUSet
	if list == "none" {
		return 0, nil
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("GPU list %q: %q is not an index", list, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("GPU list %q: %q is not a range", list, part)
			}
		}
		for i := a; i <= b; i++ {
			set |= topology.NewGPUSet(i)
		}
	}
	return set, nil
}

// expandNames reads "n1..n4" (n1, n2, n3, n4), "n1..4" or a single name.
func expandNames(spec string) ([]string, error) {
	if spec == "" {
		return nil, errors.New("nodes= is missing")
	}
	first, last, isRange := strings.Cut(spec, "..")
	if !isRange {
		return []string{spec}, nil
	}
	digits := len(first)
	for digits > 0 && first[digits-1] >= '0' && first[digits-1] <= '9' {
		digits--
	}
	prefix := first[:digits]
	lo, err := strconv.Atoi(first[digits:])
	if err != nil {
		return nil, fmt.Errorf("range %q: %q does not end in a number", spec, first)
	}
	hi, err := strconv.Atoi(strings.TrimPrefix(last, prefix))
	if err != nil || hi < lo {
		return nil, fmt.Errorf("range %q is not ascending", spec)
	}
	var out []string
	for i := lo; i <= hi; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out, nil
}
