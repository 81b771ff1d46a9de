// Package topology is Lockstep's pure topology core: a model of one GPU node
// (GPUs, the pairwise link matrix, NICs, multi-node NVLink membership), the
// built-in hardware profiles, the choice of the best GPU set on a node, the
// tree of network domains across nodes, and the all-reduce cost model that
// scores a placement.
//
// Like etcd's raft, it does no I/O and imports only the standard library: a
// snapshot goes in and a decision comes out, so the scheduler, the agent and
// the tests all drive the same code.
//
// Files by concern:
//
//	link.go           link classes and bandwidths between two GPUs
//	gpuset.go         GPUSet, the bitmask of GPU indices used everywhere
//	node.go           NodeTopology and its validation
//	topomatrix.go     the `nvidia-smi topo -m` rendering of a node
//	profile.go        the built-in hardware profiles
//	profile_nodes.go  the node topology of each profile, with its hardware facts
//	quality.go        SetQuality, how good a GPU set is
//	selection.go      Selector, the O(1) best-GPU-set lookup
//	domain.go         the domain tree across nodes built from node labels
//	cost.go           the alpha-beta ring all-reduce cost model
package topology
