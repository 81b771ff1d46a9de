package placement

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// DefaultMessageBytes is the all-reduce size a plan's estimate models when
// Options.MessageBytes is zero: topology.DefaultMessageBytes, 1 GiB.
const DefaultMessageBytes = topology.DefaultMessageBytes

// maxMembers bounds a gang so that GPU arithmetic cannot overflow; it is far
// above any cluster Kubernetes supports (5,000 nodes × 110 pods).
const maxMembers = 1 << 20

// Node is one node of the snapshot as the planner sees it.
type Node struct {
	Name string
	// Topology is nil for a node without GPU topology: its GPU count then
	// comes from FreeGPUs only and its members get the lowest free indices.
	Topology *topology.NodeTopology
	// Selector is shared per node shape; nil when Topology is nil.
	Selector *topology.Selector
	// FreeGPUs are the GPUs usable by new pods: healthy, not allocated, not
	// held by other plans.
	FreeGPUs topology.GPUSet
	// Non-GPU headroom, so a plan never puts members where CPU, memory or
	// pod slots run out. Negative values count as none.
	FreeMilliCPU int64
	FreeMemory   int64 // bytes
	FreePods     int
	// Drained marks a node of a domain drained for another gang
	// (Books.Drain): Place counts none of its GPUs free, whatever
	// FreeGPUs says, and drains no domain holding it.
	Drained bool
	// DRA is set on a node whose GPUs a DRA allocator gives the gang's
	// claims: each member gets the set DRA.Pick predicts (one PCIe root
	// first when DRAOneRoot), not the selector's best, so the plan, its
	// rating and the choice between nodes hold what the pods will get.
	DRA        *topology.DRAOrder
	DRAOneRoot bool
	// Channels are the node's ComputeDomain channels (the IMEX channels
	// NVIDIA's DRA driver publishes, one per node) and FreeChannels those
	// no claim or other plan holds. A gang whose members each claim one
	// (Gang.Channels) puts at most FreeChannels members on the node now,
	// and at most Channels once every channel is free; other gangs ignore
	// both.
	Channels, FreeChannels int
}

// Snapshot is the cluster as the planner sees it. Place only reads it.
type Snapshot struct {
	// Tree is built from node labels with the configured levels and holds
	// every node of Nodes.
	Tree *topology.Tree
	// Nodes are the nodes eligible for this gang (unschedulable, tainted and
	// affinity-mismatched ones already dropped).
	Nodes []*Node
	// Fabric is the per-level oversubscription for the cost model.
	Fabric topology.Fabric
	// Levels are the levels Tree was built with, narrowest first. Optional:
	// they name each level's node label in Unschedulable reasons and mark
	// NVLink levels for the efficiency reference. When nil, a level named
	// like one of lockstep.DefaultLevels takes that level's label and flag.
	Levels []topology.Level
	// Rater rates plans (Plan.Efficiency, Plan.Explanation). Optional: when
	// nil, or built for another message size, Place builds one with
	// NewRater, which knows the profiles of Nodes only. The scheduler keeps
	// one per domain tree, built from every node of the cluster.
	Rater *topology.Rater
}

// NodeTopology returns the GPU topology of the snapshot's node name, or nil
// when it has none or is not in the snapshot: the lookup RankOrder takes. It
// scans the nodes, which RankOrder does only for nodes holding three members
// or more.
func (s *Snapshot) NodeTopology(name string) *topology.NodeTopology {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n.Topology
		}
	}
	return nil
}

// Gang is what must be placed: Members identical members.
type Gang struct {
	Members int
	// GPUsPerMember is 0 for CPU-only members, which are still placed and
	// packed; at most topology.MaxGPUs, since a member's GPUs are on one node.
	GPUsPerMember     int
	MilliCPUPerMember int64
	MemoryPerMember   int64
	// Level is the name of the widest level the gang should fit in: "host",
	// a configured level or "cluster"; "" is no constraint.
	Level string
	// Mode applies when Level is set; "" reads as Required.
	Mode lockstep.ConstraintMode
	// Widen is how many levels a Preferred gang may go past its base level
	// now; the plugin raises it by one per wait. The base level is the
	// narrowest level at or above Level at which some domain could hold the
	// gang with every GPU of its nodes free (CPU, memory and pod slots as
	// free now: a snapshot has no totals for them); levels between Level and
	// the base are skipped at once, since waiting cannot make them fit. So a
	// Preferred gang may use levels up to base + Widen (the cluster at
	// most), and with Widen 0 it keeps to Level whenever some domain of
	// Level could ever hold it. A Required gang widens the same way from
	// the narrowest level that could ever hold it, and never past Level, so
	// it too is placed tightest first. Ignored without a Level; negative is
	// invalid.
	Widen int
	// Implicit says the constraint is the scheduler's default for a gang
	// that names none (Preferred from the host, so the tightest domain
	// first): explanations say so instead of naming a constraint the user
	// never wrote.
	Implicit bool
	// Channels says each member claims one of its node's ComputeDomain
	// channels (Node.FreeChannels): NVIDIA's driver serves one domain per
	// node and one pod of a domain per node, so a domain's members land a
	// node apart and off nodes another domain holds, whatever GPUs are
	// free there.
	Channels bool
	// NoDrain keeps a waiting gang from draining a domain (Unschedulable.Drain):
	// its last drain stalled (Books.Stalled), so waiting for that domain
	// was not worth keeping other pods off it.
	NoDrain bool
	// Near names the nodes of members placed earlier: bound before a
	// scheduler restart, or the running members of an elastic gang that
	// grew. The new members go in the narrowest domain that holds Near too,
	// so the whole gang is as tight as the bound members allow, and the
	// constraint (Level) applies to that whole gang. Nodes the tree does
	// not know are ignored.
	Near []string
}

// Assignment places one member.
type Assignment struct {
	Node string
	GPUs topology.GPUSet
}

// Plan is a placement of every member.
type Plan struct {
	// Members has one entry per gang member; members on the same node are
	// adjacent.
	Members []Assignment
	// Domain is the narrowest domain containing all members.
	Domain *topology.Domain
	// LevelName is Domain's level name: "host", a configured level or
	// "cluster".
	LevelName string
	// Estimate is the modelled all-reduce of Options.MessageBytes over all
	// the plan's GPUs. It is zero when the placement cannot be modelled:
	// CPU-only members, a node without topology, or nodes without NICs.
	Estimate topology.Estimate
	// Efficiency and Explanation are the plan's topology.Rating (Rater.Rate):
	// the efficiency against the best placement of as many GPUs on an empty
	// cluster, in (0, 1], and why. Efficiency is 0 when not modelled (as
	// Estimate, or no node of the plan matches a built-in profile).
	Efficiency  float64
	Explanation string
}

// Unschedulable explains why no plan exists now; the plugin turns it into a
// pod status message. Bad input is reported as a plain error instead.
type Unschedulable struct {
	Reason string
	// WiderLevel is the narrowest level beyond what the constraint allows at
	// which the gang would fit now; "" when the constraint is not what stops
	// it. A Preferred gang fits once Widen is enough to reach it.
	WiderLevel string
	// Drain is the domain a gang that does not fit should drain
	// (Books.Drain), nil when it should drain none. A gang that widens gets
	// one, however far it has widened, unless Gang.NoDrain or it has
	// members placed before (Gang.Near): of the domains
	// at its base level (its tightest) that could ever hold it, hold no
	// node drained for another gang and hold its Near nodes, the one with
	// room for the most members now, then the most free GPUs, then the
	// lowest ID. Without a drain, capacity freed in a domain goes to
	// whichever pod the scheduler tries next, usually a smaller one, so a
	// gang waiting for a whole domain would wait its full Preferred wait
	// and widen anyway; and a gang that widened and still does not fit
	// would wait for room anywhere while smaller pods take every GPU that
	// frees. The plugin keeps the drain while the domain gains room, and
	// releases it when the gang is planned or the domain stalls.
	Drain *topology.Domain
	// DrainFree is how many GPUs of Drain are free now, for the gang (a
	// domain's free GPUs only grow while it is drained): the plugin keeps
	// a gang from widening while they grow (Books.DrainHeld). Free GPUs,
	// not room for members, measure progress because a domain nears
	// holding the gang with every pod that ends there, long before a whole
	// node frees.
	DrainFree int
}

func (u *Unschedulable) Error() string { return u.Reason }

// Options tune Place.
type Options struct {
	// MessageBytes is the all-reduce size of Plan.Estimate; 0 means
	// DefaultMessageBytes.
	MessageBytes int64
}

// Place plans every member of g on the snapshot at once, so that no member is
// reserved before the whole gang is known to fit. It returns *Unschedulable
// when no placement exists within the constraint and a plain error for bad
// input. The rules are in the package documentation; the result depends only
// on the inputs, not on the order of s.Nodes.
func Place(s *Snapshot, g Gang, opts Options) (*Plan, error) {
	req, err := newRequest(s, g, opts)
	if err != nil {
		return nil, err
	}
	p, err := newPlanner(s, req)
	if err != nil {
		return nil, err
	}
	defer p.release()
	chosen, ok := p.choose()
	if !ok {
		return nil, p.unschedulable()
	}
	p.place(chosen, req.members)
	return p.plan()
}

// request is a validated Gang with its levels resolved to tree indices.
type request struct {
	members  int
	gpus     int
	milliCPU int64
	memory   int64
	// channels: each member claims one of its node's channels.
	channels bool
	// want is the tree level index of Gang.Level (the root when unset) and
	// stop the widest level the search may use now. For a gang that widens
	// (Preferred with a Level), stop is only known once the planner has
	// aggregated the tree: base + widen, where base is the narrowest level
	// at or above want that could ever hold the gang (planner.settle); base
	// is want for every other gang.
	want, base, stop int
	// from is the level the widening counts from (want for Preferred, the
	// host for Required) and limit the widest it may reach (want for
	// Required, the root otherwise).
	from, limit  int
	widens       bool
	widen        int
	implicit     bool
	noDrain      bool
	mode         lockstep.ConstraintMode
	messageBytes int64
	// levelNames are the tree's level names by index and labelKeys their
	// node labels ("" for host, cluster and unknown keys); levels are the
	// configured levels (see Snapshot.Levels), without host and cluster.
	levelNames []string
	labelKeys  []string
	levels     []topology.Level
	near       []string
}

func newRequest(s *Snapshot, g Gang, opts Options) (request, error) {
	if s == nil || s.Tree == nil {
		return request{}, errors.New("snapshot has no domain tree")
	}
	var errs []error
	switch {
	case g.Members < 1:
		errs = append(errs, fmt.Errorf("members = %d: want at least 1", g.Members))
	case g.Members > maxMembers:
		errs = append(errs, fmt.Errorf("members = %d: at most %d are supported", g.Members, maxMembers))
	}
	if g.GPUsPerMember < 0 || g.GPUsPerMember > topology.MaxGPUs {
		errs = append(errs, fmt.Errorf("gpusPerMember = %d: want 0 to %d, a member's GPUs are on one node", g.GPUsPerMember, topology.MaxGPUs))
	}
	if g.MilliCPUPerMember < 0 {
		errs = append(errs, fmt.Errorf("milliCPUPerMember = %d: want at least 0", g.MilliCPUPerMember))
	}
	if g.MemoryPerMember < 0 {
		errs = append(errs, fmt.Errorf("memoryPerMember = %d: want at least 0", g.MemoryPerMember))
	}
	if opts.MessageBytes < 0 {
		errs = append(errs, fmt.Errorf("messageBytes = %d: want at least 0", opts.MessageBytes))
	}

	names := s.Tree.LevelNames()
	top := len(names) - 1
	index := func(field, name string) int {
		if name == "" {
			return top
		}
		i := slices.Index(names, name)
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a level of the tree (%v)", field, name, names))
			return top
		}
		return i
	}
	r := request{
		members:      g.Members,
		gpus:         g.GPUsPerMember,
		milliCPU:     g.MilliCPUPerMember,
		memory:       g.MemoryPerMember,
		channels:     g.Channels,
		want:         index("level", g.Level),
		stop:         top,
		mode:         g.Mode,
		messageBytes: opts.MessageBytes,
		levelNames:   names,
		near:         g.Near,
		implicit:     g.Implicit,
		noDrain:      g.NoDrain,
	}
	r.base, r.from, r.limit = r.want, r.want, top
	if r.messageBytes == 0 {
		r.messageBytes = DefaultMessageBytes
	}
	if g.Level != "" {
		switch {
		case g.Mode != "" && !g.Mode.Valid():
			errs = append(errs, fmt.Errorf("mode %q: want %s", g.Mode, lockstep.ConstraintModeList()))
		case g.Mode == lockstep.Preferred:
			r.widens, r.widen, r.stop = true, g.Widen, r.want
		default:
			// Required, which "" reads as. The level caps the gang;
			// below it the gang is placed tightest first, widening from
			// the narrowest level that could ever hold it as a Preferred
			// gang does.
			r.mode, r.stop, r.from, r.limit = lockstep.Required, r.want, 0, r.want
			r.widens, r.widen = true, g.Widen
		}
		if g.Widen < 0 {
			errs = append(errs, fmt.Errorf("widen = %d: want at least 0", g.Widen))
		}
	}
	levels, keys, err := configuredLevels(s.Levels, names)
	if err != nil {
		errs = append(errs, err)
	}
	r.levels, r.labelKeys = levels, keys
	if err := errors.Join(errs...); err != nil {
		return request{}, fmt.Errorf("invalid gang: %w", err)
	}
	return r, nil
}

// settle fixes the levels of a gang that widens, given base: the narrowest
// level at or above want at which some domain could hold the gang with every
// GPU free (planner.base). A wait can only help at levels where some domain
// could hold the gang, so the widening counts from there. Levels no node is
// labelled for (absent) hold the same nodes as the level above, so a wait
// spent widening into one would buy nothing: base and every step of the
// widening pass over them.
func (r *request) settle(base int, absent []bool) {
	if !r.widens {
		return
	}
	top := len(r.levelNames) - 1
	skip := func(level int) int {
		for level < top && level < len(absent) && absent[level] {
			level++
		}
		return level
	}
	r.base = skip(base)
	r.stop = r.base
	for w := r.widen; w > 0 && r.stop < r.limit; w-- {
		r.stop = skip(r.stop + 1)
	}
	r.stop = min(r.stop, r.limit)
}

// configuredLevels returns the levels of a tree with the given level names,
// and the node label of every tree level. Given levels must match the names;
// without them levels are rebuilt from the names, taking label keys and
// NVLink flags from lockstep.DefaultLevels where a name matches and the name
// as a placeholder key elsewhere (it is valid for BestAllReduce, which reads
// only names and flags, and is never shown).
func configuredLevels(given []topology.Level, names []string) ([]topology.Level, []string, error) {
	inner := names[1 : len(names)-1]
	keys := make([]string, len(names))
	if given != nil {
		if len(given) != len(inner) {
			return nil, nil, fmt.Errorf("snapshot has %d levels, its tree %d", len(given), len(inner))
		}
		for i, l := range given {
			if l.Name != inner[i] {
				return nil, nil, fmt.Errorf("snapshot levels[%d] is %q, its tree's is %q", i, l.Name, inner[i])
			}
			keys[i+1] = l.LabelKey
		}
		return given, keys, nil
	}
	defaults := lockstep.DefaultTopologyConfig()
	levels := make([]topology.Level, len(inner))
	for i, name := range inner {
		levels[i] = topology.Level{Name: name, LabelKey: name}
		if d, ok := defaults.Level(name); ok {
			levels[i] = d
			keys[i+1] = d.LabelKey
		}
	}
	return levels, keys, nil
}
