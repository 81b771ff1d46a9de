package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

const (
	// DefaultPodResourcesSocket is where the kubelet serves the
	// pod-resources API.
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

	// podResourcesTimeout bounds one List call, as the kubelet's own client
	// does: a kubelet that does not answer must not stall the agent.
	podResourcesTimeout = 10 * time.Second
	// podResourcesMaxMessage is the kubelet's own limit for the response,
	// which lists every pod of the node.
	podResourcesMaxMessage = 16 << 20
)

// Allocation is the devices of one resource the kubelet has handed to one
// container.
type Allocation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// DeviceIDs are the device plugin's ids: GPU UUIDs ("GPU-…"), with a
	// "::<n>" replica suffix when the GPU is shared by time-slicing or MPS,
	// MIG device UUIDs ("MIG-…"), or NVML indices under the plugin's index
	// id strategy.
	DeviceIDs []string `json:"deviceIDs"`
	// GPUs are the NVML indices of DeviceIDs, set by ResolveGPUs; a shared
	// GPU appears once.
	GPUs []int `json:"gpus,omitempty"`
}

// ListGPUAllocations asks the kubelet's pod-resources API, served on the
// unix socket socketPath, which devices of resourceName each container
// holds. Containers holding none are left out. The result is sorted by
// namespace, pod and container.
func ListGPUAllocations(ctx context.Context, socketPath, resourceName string) ([]Allocation, error) {
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %q: %w", socketPath, err)
	}
	// The client connects lazily; checking first turns "connection
	// refused after retries" into an error that says what is missing.
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("pod-resources socket: %w (mount the kubelet's pod-resources directory into the agent)", err)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", abs, err)
	}
	defer func() { _ = conn.Close() }()

	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources from %s: %w", abs, err)
	}

	var allocs []Allocation
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == resourceName {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) == 0 {
				continue
			}
			allocs = append(allocs, Allocation{
				Namespace: pod.GetNamespace(),
				Pod:       pod.GetName(),
				Container: c.GetName(),
				DeviceIDs: ids,
			})
		}
	}
	sort.Slice(allocs, func(i, j int) bool {
		a, b := allocs[i], allocs[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Container < b.Container
	})
	return allocs, nil
}

// ResolveGPUs returns allocs with GPUs set from each device id: a GPU UUID,
// with or without a replica suffix, or an NVML index. It also returns the
// ids that name no GPU of gpus, such as MIG devices, which have no whole-GPU
// index.
func ResolveGPUs(allocs []Allocation, gpus []topology.GPU) (resolved []Allocation, unresolved []string) {
	byUUID := make(map[string]int, len(gpus))
	for _, g := range gpus {
		if g.UUID != "" {
			byUUID[strings.ToLower(g.UUID)] = g.Index
		}
	}
	resolved = make([]Allocation, len(allocs))
	for i, a := range allocs {
		a.DeviceIDs = append([]string(nil), a.DeviceIDs...)
		a.GPUs = nil
		seen := topology.GPUSet(0)
		for _, id := range a.DeviceIDs {
			g, ok := gpuOfDeviceID(id, byUUID, len(gpus))
			if !ok {
				unresolved = append(unresolved, id)
				continue
			}
			if !seen.Has(g) {
				seen |= topology.NewGPUSet(g)
				a.GPUs = append(a.GPUs, g)
			}
		}
		sort.Ints(a.GPUs)
		resolved[i] = a
	}
	return resolved, unresolved
}

func gpuOfDeviceID(id string, byUUID map[string]int, count int) (int, bool) {
	base, _, _ := strings.Cut(id, "::")
	if g, ok := byUUID[strings.ToLower(base)]; ok {
		return g, true
	}
	if n, err := strconv.Atoi(base); err == nil && n >= 0 && n < count {
		return n, true
	}
	return 0, false
}
