// Package placement is Lockstep's whole-gang planner: given a snapshot of the
// eligible nodes (free GPUs, CPU, memory and pod slots) and the domain tree
// over them, it decides where every member of a gang goes before any member
// is reserved, so a gang is admitted whole or not at all. Like the topology
// package it builds on, it does no I/O and imports only the standard library
// and pkg/topology: a snapshot goes in, a Plan or an *Unschedulable comes out.
//
// The rules, in order:
//
//  1. Room. A node can take min(⌊free GPUs / k⌋, ⌊free CPU / CPU per
//     member⌋, ⌊free memory / memory per member⌋, free pod slots) members
//     of k GPUs: any k free GPUs of one node form a member's set, so
//     ⌊popcount/k⌋ disjoint sets fit. A domain's room is the sum over its
//     nodes, aggregated bottom-up in one walk of the tree, O(nodes × levels).
//     The same walk sums the room each domain would have with every GPU of
//     its nodes free (a node's GPU count from its topology, or its free GPUs
//     without one; CPU, memory and pod slots as free now, since a snapshot
//     has no totals for them).
//  2. Level. Levels are searched narrowest first (host, NVLink clique, leaf,
//     spine, …, cluster) up to a stop level; the first level where some
//     domain has room for every member wins, so a gang that fits on one node
//     is placed on one node and a GB200 gang that fits in one NVLink clique
//     stays in it. The stop is the cluster for a gang without Gang.Level,
//     and Gang.Widen levels past the base level otherwise: at most the
//     cluster for Preferred, at most Gang.Level for Required. The base
//     level is the narrowest at or above Gang.Level (for Required, at or
//     above the host) where some domain could hold the gang with every
//     GPU free: levels no domain could ever hold it at are skipped at once,
//     as waiting cannot make them fit, while a level that could hold it once
//     other jobs finish is kept until the plugin raises Widen. A 256-GPU
//     gang that prefers a leaf on 64-GPU leaves thus goes to a spine without
//     waiting, and a 48-GPU one waits for a leaf.
//  3. Best fit. Among that level's domains with room, the one left with the
//     fewest free GPUs after placement wins (ties: more modelled bandwidth,
//     then fewer member slots left, then the lowest domain ID). A 32-GPU
//     gang thus goes to the half-full leaf that fits it, not to an empty
//     one, which stays whole for a bigger gang.
//  4. Packing. Inside the chosen domain members go to as few children as
//     possible, recursively: while no child can take all remaining members
//     the roomiest child is filled, then the remainder goes to the best fit
//     among the children that can take it. So a spine fills one leaf before
//     spilling into a second, and a leaf packs members onto the nodes that
//     take the most of them, preferring exact fits.
//  5. GPU sets. Each member's GPUs are Selector.Best of what the node still
//     has free after the members placed on it before (NVLink-connected sets,
//     DGX-1 NVLink pairs, A100 bridge pairs); nodes without a selector give
//     their lowest free indices. On a DRA node (Node.DRA) the set is the one
//     the DRA allocator will give the member's claim (topology.DRAOrder),
//     and that set's quality is what rules 3 and 4 compare.
//  6. Cost. The plan carries the all-reduce estimate of its placement and its
//     efficiency against the best placement of as many GPUs of the dominant
//     profile on an empty cluster.
//
// Modelled bandwidth, the tie-break of rules 3 and 4, is a proxy computed
// with the room and needing no trial placement: for a whole gang on one node,
// the weakest link of the best set of all its GPUs; across nodes, the lower
// of the weakest link of a member's best set and either the NVLink fabric
// (every usable node in one clique) or the NIC share per GPU, the lowest over
// the domain's usable nodes.
//
// When no domain fits, the *Unschedulable names the shortfall: the GPUs
// missing in the cluster, or the level the constraint stops at, the room of
// its best domain and what limits it, the levels a Preferred gang skipped,
// and the narrowest wider level that would fit (Unschedulable.WiderLevel).
// A gang that widens is also given a domain of its base level to drain
// (Unschedulable.Drain), unless its last drain stalled (Gang.NoDrain).
//
// # Decide
//
// Decide is the whole rule for one attempt at a gang, which the scheduler
// plugin only feeds and carries out: the constraint its PodGroup names is
// checked (a level of lockstep.TopologyConfig.HasLevel, a mode of
// lockstep.ConstraintModes) and defaulted, a gang naming none is placed
// tightest first (Gang.Implicit), the widening its wait allows is added
// (Policy.Widen: none while its drain holds it), its pending members are
// planned or, when not all fit, those its minMember needs; a gang that
// does not fit is told which domain to drain and whether to be retried on
// the clock (Policy.NextWiden).
//
// # Drains
//
// A gang waiting for a domain of its base level would otherwise wait in
// vain: capacity freed in any domain goes to whichever pod comes next,
// usually a smaller one, so a domain rarely frees whole. Books.Drain holds
// the domain Place named for the waiting gang; planners of other gangs see
// its nodes as Node.Drained (no GPU free, no drain of theirs may include
// them) and pods outside gangs are kept off them, until the gang is planned
// (Books.Add) or the drain is dropped or stalls (ExpireDrain: the domain
// freed no GPU for the stall the caller passes). A domain is drained for
// one gang at a time. A gang drains again whenever it is turned away,
// however far it has widened, so a big gang is not starved by smaller pods
// that take every GPU as it frees; but not for a stall after its last
// drain stalled (Books.Stalled): that domain waits on pods that are not
// ending, and draining it again at once would keep other pods off room
// they could use, for nothing. Pods that outrank the gang are not kept off
// (Books.KeptOff).
//
// # Preemption
//
// A gang that does not fit may evict lower-priority work (Preempt): whole
// gangs and single pods, never part of a gang, never of equal or higher
// priority, never one younger than a minimum run time. Levels are tried
// narrowest first up to what the constraint allows, so the preemptor gets
// the placement it would have on an empty cluster; within the first level
// where eviction makes room, the domain whose victims cost least wins:
// the highest victim priority, then the GPU time the victims had run (work
// lost to their restart), then how many are hit. In a domain, victims are
// added cheapest first until Place succeeds, then each is spared, most
// expensive first, if the gang still fits without it. Books.Hold keeps
// the freed domain for the preemptor, as a drain at its priority that
// holds while any victim pod is still going (a trainer checkpointing on
// SIGTERM may take its whole grace period), takes over the drains of
// lower-priority gangs there, and remembers the victims so no other
// preemption counts them again (Books.EvictedFor).
//
// # Books
//
// Books hold every gang's plan between planning and binding: the GPUs a
// plan holds for open member slots, the slots pods reserved, and the GPUs
// given to reserved pods until the node reports them. Before planning gang
// k, take Books.HeldOn(node, k) out of each node's free GPUs so no two
// gangs plan into the same capacity. Books are a pure state machine: the
// caller passes the time (Add, Expired), drops what Expired or Held.Fits
// condemns, and locks around them if it shares them; the scheduler plugin
// does all three.
//
// # Data-driven tests
//
// TestDataDriven runs the scripts in testdata/*.txt (cockroachdb/datadriven
// format): each case builds a topology, holds plans, places a gang and
// states the plan or the Unschedulable reason expected. Add a case by
// appending a subtest with an empty expectation and running
//
//	go test ./pkg/topology/placement/ -run TestDataDriven -rewrite
//
// then check the diff by hand; the directives are listed on TestDataDriven.
package placement
