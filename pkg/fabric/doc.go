// Package fabric turns fabric discovery data into per-host network tiers: the
// leaf, spine and core domains that Lockstep's topology levels read from node
// labels. It is pure (standard library only): text or JSON in, a Topology out.
//
// Two inputs are understood:
//
//   - the text topology written by ibnetdiscover (infiniband-diags, part of
//     rdma-core), parsed by ParseIBNetDiscover into a Fabric, whose Topology
//     method derives the tiers;
//   - the instance document written by NVIDIA topograph's graph engine
//     ({"instances": [{"id", "network_layers", ...}]}), parsed by
//     ParseTopograph. Topograph has already derived the tiers; its layers are
//     taken as they are, closest switch first.
//
// # Tier rules for ibnetdiscover
//
// Hosts. A channel adapter (Ca) belongs to the host named by the first
// whitespace-separated word of its node description ("node-01 mlx5_0" and
// "dgx-a12 HCA-1" give node-01 and dgx-a12), which is what rdma-ndd writes.
// Adapters whose description contains "Mellanox Technologies" are not hosts:
// that is the SHARP aggregation node inside every Quantum switch ("Mellanox
// Technologies Aggregation Node") and the firmware default of an adapter whose
// description was never set. Options.HostName replaces this rule.
//
// Switch tiers. A leaf (tier 1) is a switch with at least one host adapter
// cabled to it. Every other switch gets the tier 1 + its hop distance to the
// nearest leaf, found by breadth-first search over switch-to-switch cables:
// spines are tier 2, cores tier 3. Parallel cables count once. Switches that
// no leaf reaches get tier 0 and play no part.
//
// A host's leaf. A host whose adapters sit on several leaves (rail-optimised
// fabrics) gets the leaf that most of its adapters are cabled to; a tie goes
// to the leaf of its first adapter, adapters ordered by node description in
// natural order (mlx5_2 before mlx5_10, HCA-1 before HCA-2), then by GUID. In
// a rail-optimised fabric that is the rail-0 leaf, which names the host's
// scalable unit.
//
// Domains above the leaf. The tier-k domain (k ≥ 2) of a host is the set of
// switches of tier 1..k connected to its leaf without leaving tiers 1..k:
// leaves joined through spines form a spine group (a pod), spine groups joined
// through cores form a core group. Every host attached to a switch gets one
// domain per tier up to the fabric's depth; above the top of its own part of
// the fabric its widest domain repeats under the higher tier.
//
// Domain names are Kubernetes label values built from switch GUIDs, which are
// unique and survive renaming: "leaf-<guid>" for a leaf, and for a group
// "<role>-group-<guid>", role being the highest tier present in the group
// (spine, core, tierN) and guid the lowest GUID among that tier's switches in
// the group.
//
// Known limits: a leaf whose hosts are all down looks like a switch one tier
// above the spines (groupings stay right; the depth and its group name do
// not), and a host cabled straight into a spine turns that spine into a leaf,
// which can merge pods at tier 2; keep such hosts out with Options.HostName.
package fabric
