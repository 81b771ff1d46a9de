package bench

import (
	"fmt"
	"slices"
)

// Bursts of the in-process scale run (internal/perf), by the name
// lockstep-bench's --inprocess-burst takes.
const (
	// BurstGangs is the burst the committed make bench numbers were taken
	// with: gangs whose pod counts cycle ScaleGangSizes, one GPU request
	// for every pod.
	BurstGangs = "gangs"
	// BurstMixed is MixedBurst: gangs of 8 to 4,096 GPUs beside many
	// single-pod jobs, sized to the cluster.
	BurstMixed = "mixed"
)

// BurstJob is one job of a scale burst: Pods pods of GPUsPerPod GPUs each,
// all in one PodGroup of minMember Pods (the TrainingJob controller writes
// one for every job, single-pod ones included).
type BurstJob struct {
	Pods       int `json:"pods"`
	GPUsPerPod int `json:"gpus_per_pod"`
}

// GPUs is what the job asks for in all.
func (j BurstJob) GPUs() int { return j.Pods * j.GPUsPerPod }

// GangBurst is the BurstGangs burst: gangs jobs whose pod counts cycle
// ScaleGangSizes, each pod asking for gpusPerPod GPUs.
func GangBurst(gangs, gpusPerPod int) []BurstJob {
	jobs := make([]BurstJob, gangs)
	for i := range jobs {
		jobs[i] = BurstJob{Pods: ScaleGangSizes[i%len(ScaleGangSizes)], GPUsPerPod: gpusPerPod}
	}
	return jobs
}

// Sizes of MixedBurst's gangs, in GPUs: every power of two between.
const (
	mixedSmallestGang = 8
	mixedLargestGang  = 4096
)

// Shares of the cluster's nodes MixedBurst fills, in percent. The stock
// scheduler places each pod on its own and spreads them (LeastAllocated), so
// in the worst case every single-pod job takes a node of its own that no
// whole-node gang pod fits on any more; the burst is sized for that case,
// and the rest is headroom: a burst that cannot bind whole never finishes.
const (
	mixedUsedPercent  = 60
	mixedSmallPercent = 16
)

// MixedBurst is the BurstMixed burst for a cluster of nodes nodes of
// gpusPerNode GPUs each (a power of two, at most 8, so every gang size is
// whole nodes). Its gangs span every power of two from 8 GPUs up to the
// largest (at most 4,096) whose classes fit the gangs' share of the
// cluster, each class holding as many GPUs as one gang of the largest:
// one gang of the largest, two of half of it, down to the most gangs of 8
// GPUs. Each gang pod asks for a whole node. Beside them are
// mixedSmallPercent of the nodes' count in single-pod jobs asking for 1 to
// gpusPerNode GPUs in turn. Gangs and single-pod jobs are interleaved and
// gang sizes take turns, so no scheduler sees one kind of job first. It
// returns an error when not even a class of 8-GPU gangs fits.
func MixedBurst(nodes, gpusPerNode int) ([]BurstJob, error) {
	if gpusPerNode < 1 || gpusPerNode > mixedSmallestGang || gpusPerNode&(gpusPerNode-1) != 0 {
		return nil, fmt.Errorf("mixed burst: %d GPUs per node; want a power of two up to %d", gpusPerNode, mixedSmallestGang)
	}
	small := nodes * mixedSmallPercent / 100
	gangNodes := nodes*mixedUsedPercent/100 - small
	// Classes from 8 GPUs to largest each hold largest GPUs: their nodes
	// are the number of classes times largest's nodes.
	largest, classes := 0, 0
	for size, n := mixedSmallestGang, 1; size <= mixedLargestGang; size, n = size*2, n+1 {
		if n*size/gpusPerNode > gangNodes {
			break
		}
		largest, classes = size, n
	}
	if largest == 0 {
		return nil, fmt.Errorf("mixed burst: %d nodes of %d GPUs hold no %d-GPU gang beside %d single-pod jobs", nodes, gpusPerNode, mixedSmallestGang, small)
	}
	// remaining[i] is how many gangs of class i (largest>>i GPUs) are
	// still to be listed.
	remaining := make([]int, classes)
	gangs := 0
	for i := range remaining {
		remaining[i] = 1 << i
		gangs += remaining[i]
	}
	jobs := make([]BurstJob, 0, gangs+small)
	var smallGPUs int
	addSmall := func(want int) {
		// Spread the single-pod jobs evenly among the gangs listed so far.
		for smallGPUs < want {
			jobs = append(jobs, BurstJob{Pods: 1, GPUsPerPod: smallGPUs%gpusPerNode + 1})
			smallGPUs++
		}
	}
	listed := 0
	for listed < gangs {
		for i := range remaining {
			if remaining[i] == 0 {
				continue
			}
			remaining[i]--
			listed++
			jobs = append(jobs, BurstJob{Pods: (largest >> i) / gpusPerNode, GPUsPerPod: gpusPerNode})
			addSmall(small * listed / gangs)
		}
	}
	return jobs, nil
}

// BurstBucket is the jobs of a burst that ask for GPUs GPUs in all.
type BurstBucket struct {
	GPUs int `json:"gpus"`
	Jobs int `json:"jobs"`
	Pods int `json:"pods"`
}

// BurstMix is the burst's histogram of job sizes, smallest first.
func BurstMix(jobs []BurstJob) []BurstBucket {
	byGPUs := map[int]*BurstBucket{}
	var mix []BurstBucket
	for _, j := range jobs {
		b, ok := byGPUs[j.GPUs()]
		if !ok {
			b = &BurstBucket{GPUs: j.GPUs()}
			byGPUs[j.GPUs()] = b
		}
		b.Jobs++
		b.Pods += j.Pods
	}
	for _, b := range byGPUs {
		mix = append(mix, *b)
	}
	slices.SortFunc(mix, func(a, b BurstBucket) int { return a.GPUs - b.GPUs })
	return mix
}
