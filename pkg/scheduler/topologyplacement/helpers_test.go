package topologyplacement

import "github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"

var (
	gpuNode         = schedtesting.GPUNode
	nodeInfo        = schedtesting.NodeInfo
	hgxNodeTopology = schedtesting.HGXNodeTopology
	draNodeTopology = schedtesting.DRANodeTopology
	gpuSlice        = schedtesting.GPUSlice
	claimPod        = schedtesting.ClaimPod
	withAllocation  = schedtesting.WithAllocation
	topologyAt      = schedtesting.HGXNodeTopologyAt
)
