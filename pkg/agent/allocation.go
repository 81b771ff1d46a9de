// Package agent is the topology agent: it publishes each GPU node's
// NodeTopology (hardware, GPU health and allocation, heartbeat) and the node
// labels it owns. In real mode the facts come from NVML, sysfs and the
// kubelet; in fake mode from hardware profiles, with the device plugin's GPU
// allocation emulated for pods bound to fake nodes.
package agent

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// GPURequest returns how many GPUs a pod holds while it runs: the device
// plugin serves init containers one at a time before the app containers, so
// it is the larger of the biggest init request and the app containers' sum.
func GPURequest(pod *corev1.Pod) int {
	app := 0
	for _, c := range pod.Spec.Containers {
		app += gpuLimit(c)
	}
	initMax := 0
	for _, c := range pod.Spec.InitContainers {
		initMax = max(initMax, gpuLimit(c))
	}
	return max(app, initMax)
}

func gpuLimit(c corev1.Container) int {
	// Extended resources are requested through limits; requests, if given,
	// must equal them.
	if q, ok := c.Resources.Limits[lockstep.GPUResource]; ok {
		return int(q.Value())
	}
	if q, ok := c.Resources.Requests[lockstep.GPUResource]; ok {
		return int(q.Value())
	}
	return 0
}

// HoldsGPUs reports whether the pod's GPUs are still taken: until the pod has
// finished or is gone.
func HoldsGPUs(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// AllocationProblem is a pod the emulated device plugin could not serve as
// asked, with the reason. A real kubelet would fail such a pod's admission.
type AllocationProblem struct {
	Pod    *corev1.Pod
	Reason string
}

// Allocator emulates the device plugin's GPU assignment on one node.
type Allocator struct {
	Node     *topology.NodeTopology
	Selector *topology.Selector
	// Unhealthy GPUs are never handed out.
	Unhealthy topology.GPUSet
	// IgnoreAnnotation serves pods as the stock NVIDIA device plugin does,
	// which never reads lockstep.dev/gpus: the highest-indexed free GPUs
	// (lockstep.FakeAllocationDevicePlugin).
	IgnoreAnnotation bool
}

// Allocate returns the node's allocations for the pods bound to it. Prior
// allocations of pods that still hold GPUs are kept as they are, like a
// device plugin's checkpoint; pods new to the node get the GPUs the scheduler
// chose (the lockstep.dev/gpus annotation) when those are free, otherwise the
// best free set; with IgnoreAnnotation, the highest-indexed free GPUs. New pods are served oldest first so the result does not
// depend on list order.
func (a *Allocator) Allocate(prior []v1alpha1.GPUAllocation, pods []*corev1.Pod) ([]v1alpha1.GPUAllocation, []AllocationProblem) {
	byUID := make(map[string]v1alpha1.GPUAllocation, len(prior))
	for _, alloc := range prior {
		byUID[alloc.PodUID] = alloc
	}
	var (
		allocs   []v1alpha1.GPUAllocation
		problems []AllocationProblem
		pending  []*corev1.Pod
		taken    = a.Unhealthy
	)
	for _, pod := range pods {
		if !HoldsGPUs(pod) || GPURequest(pod) == 0 {
			continue
		}
		if alloc, ok := byUID[string(pod.UID)]; ok {
			set := toGPUSet(alloc.GPUs)
			if set&taken == 0 {
				allocs = append(allocs, alloc)
				taken |= set
				continue
			}
			// Overlap can only come from a corrupted status; re-serve the pod.
		}
		pending = append(pending, pod)
	}
	sort.Slice(pending, func(i, j int) bool {
		ti, tj := pending[i].CreationTimestamp, pending[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return pending[i].Namespace+"/"+pending[i].Name < pending[j].Namespace+"/"+pending[j].Name
	})
	all := a.Node.AllGPUs()
	for _, pod := range pending {
		want := GPURequest(pod)
		set, reason := a.choose(pod, want, all&^taken)
		if set == 0 {
			problems = append(problems, AllocationProblem{Pod: pod, Reason: reason})
			continue
		}
		if reason != "" {
			problems = append(problems, AllocationProblem{Pod: pod, Reason: reason})
		}
		taken |= set
		allocs = append(allocs, v1alpha1.GPUAllocation{
			Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), GPUs: toInt32s(set),
		})
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].PodUID < allocs[j].PodUID })
	return allocs, problems
}

// choose picks want GPUs from free for pod. A non-empty reason with a
// non-empty set means the scheduler's choice was overridden.
func (a *Allocator) choose(pod *corev1.Pod, want int, free topology.GPUSet) (topology.GPUSet, string) {
	if a.IgnoreAnnotation {
		if free.Len() < want {
			return 0, fmt.Sprintf("asks for %d GPUs, %d free", want, free.Len())
		}
		return highest(free, want), ""
	}
	var override string
	if s, ok := pod.Annotations[lockstep.AnnotationGPUs]; ok {
		set, err := topology.ParseGPUList(s)
		switch {
		case err != nil:
			override = fmt.Sprintf("%s: %v", lockstep.AnnotationGPUs, err)
		case set.Len() != want:
			override = fmt.Sprintf("%s=%q names %d GPUs, the pod asks for %d", lockstep.AnnotationGPUs, s, set.Len(), want)
		case set&^a.Node.AllGPUs() != 0:
			override = fmt.Sprintf("%s=%q names GPUs the node does not have", lockstep.AnnotationGPUs, s)
		case set&^free != 0:
			override = fmt.Sprintf("%s=%q: GPUs %s are not free", lockstep.AnnotationGPUs, s, (set &^ free).String())
		default:
			return set, ""
		}
	}
	set, _, ok := a.Selector.Best(free, want)
	if !ok {
		return 0, fmt.Sprintf("asks for %d GPUs, %d free", want, free.Len())
	}
	if override != "" {
		override += "; assigned " + set.String() + " instead"
	}
	return set, override
}

// highest returns the k highest-indexed GPUs of set, which has at least k.
func highest(set topology.GPUSet, k int) topology.GPUSet {
	idx := set.Indices()
	return topology.NewGPUSet(idx[len(idx)-k:]...)
}

func toGPUSet(indices []int32) topology.GPUSet {
	var set topology.GPUSet
	for _, i := range indices {
		set |= topology.NewGPUSet(int(i))
	}
	return set
}

func toInt32s(set topology.GPUSet) []int32 {
	idx := set.Indices()
	out := make([]int32, len(idx))
	for i, v := range idx {
		out[i] = int32(v)
	}
	return out
}
