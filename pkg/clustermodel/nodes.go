package clustermodel

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// Labels and annotations the model writes on nodes.
const (
	// KWOKNodeAnnotation marks a node KWOK manages
	// (docs/cluster-model.md, "What a node gets").
	KWOKNodeAnnotation = "kwok.x-k8s.io/node"

	// podsPerNode is the kubelet's default max-pods.
	podsPerNode = 110
	// ephemeralStorageGiB is the node's allocatable local scratch: real GPU
	// nodes have terabytes of it, and operators' pods ask for some (the
	// training-operator's MPI launcher init container requests 5Gi), which
	// a node without the resource can never fit.
	ephemeralStorageGiB = 1024
)

// Nodes builds the model's Node objects, pool by pool in index order. The
// model must have been validated (Load and Parse do that).
func (m *Model) Nodes() []*corev1.Node {
	nodes := make([]*corev1.Node, 0, m.NodeCount())
	// next holds, per level, the first domain index not used by earlier pools.
	next := map[string]int{}
	for _, pool := range m.Pools {
		profile, _ := topology.LookupProfile(pool.Profile)
		first := map[string]int{}
		for _, l := range m.Levels {
			size, ok := pool.NodesPerDomain[l.Name]
			if !ok {
				continue
			}
			start, pinned := pool.FirstDomain[l.Name]
			if !pinned {
				start = next[l.Name]
			}
			first[l.Name] = start
			used := start + (pool.Nodes+size-1)/size
			next[l.Name] = max(next[l.Name], used)
		}
		for i := 0; i < pool.Nodes; i++ {
			labels := map[string]string{}
			for _, l := range m.Levels {
				size, ok := pool.NodesPerDomain[l.Name]
				if !ok {
					continue
				}
				labels[l.NodeLabel] = fmt.Sprintf("%s-%d", l.Name, first[l.Name]+i/size)
			}
			nodes = append(nodes, newNode(pool.nodeName(i), pool, profile, labels))
		}
	}
	return nodes
}

// nodeName returns the name of the pool's i-th node, zero-padded so names
// sort in index order.
func (p Pool) nodeName(i int) string {
	width := len(strconv.Itoa(p.Nodes - 1))
	return fmt.Sprintf("%s-%0*d", p.Name, width, i)
}

func newNode(name string, pool Pool, profile topology.Profile, levelLabels map[string]string) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:           name,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         profile.Arch,
		"type":                         "kwok",
		lockstep.LabelProfile:          profile.Name,
		lockstep.LabelPool:             pool.Name,
		lockstep.LabelNVIDIAGPUProduct: profile.GPUProduct,
		lockstep.LabelNVIDIAGPUCount:   strconv.Itoa(profile.GPUCount),
		lockstep.LabelNVIDIAGPUMemory:  strconv.Itoa(profile.GPUMemoryMiB),
	}
	for k, v := range levelLabels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(profile.CPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(profile.MemoryGiB)<<30, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(podsPerNode, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(ephemeralStorageGiB<<30, resource.BinarySI),
	}
	if pool.DRA() {
		// The GPU Operator's switch that keeps its device plugin off the
		// node; NVIDIA's DRA driver itself labels no node. The GPUs are the
		// driver's ResourceSlice devices, which the fake agent publishes.
		labels[lockstep.LabelNVIDIADeployDevicePlugin] = "false"
		labels[lockstep.LabelGPUDriver] = lockstep.GPUDriverDRA
	} else {
		capacity[lockstep.GPUResource] = *resource.NewQuantity(int64(profile.GPUCount), resource.DecimalSI)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{KWOKNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:    profile.Arch,
				OperatingSystem: "linux",
			},
			Phase: corev1.NodeRunning,
		},
	}
}
