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

// Allocation is the GPUs the kubelet has handed to one container: devices
// of a device plugin's resource, and devices a DRA driver prepared for the
// container's ResourceClaims.
type Allocation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// DeviceIDs are the device plugin's ids: GPU UUIDs ("GPU-…"), with a
	// "::<n>" replica suffix when the GPU is shared by time-slicing or MPS,
	// MIG device UUIDs ("MIG-…"), or NVML indices under the plugin's index
	// id strategy.
	DeviceIDs []string `json:"deviceIDs,omitempty"`
	// ClaimDevices are the GPU DRA driver's devices the kubelet prepared
	// for the container's ResourceClaims (the pod-resources API's
	// DynamicResources), named as the claim's allocation names them. Their
	// GPUs are known once joined to the node's ResourceSlice by UUID
	// (ResolveClaimDevices): the driver names devices after minor numbers,
	// not NVML indices.
	ClaimDevices []ClaimDevice `json:"claimDevices,omitempty"`
	// GPUs are the NVML indices of DeviceIDs and ClaimDevices, set by
	// ResolveGPUs and ResolveClaimDevices; a shared GPU appears once.
	GPUs []int `json:"gpus,omitempty"`
}

// ClaimDevice is a device prepared for a ResourceClaim.
type ClaimDevice struct {
	// Claim is the claim's namespace/name.
	Claim  string `json:"claim"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

// PodResources is what the agent reads of the kubelet's pod-resources
// answer.
type PodResources struct {
	// Allocations are the containers holding devices of the resource or
	// the DRA driver asked for, sorted by namespace, pod and container.
	Allocations []Allocation
	// DynamicResources has every container the kubelet listed, by
	// "namespace/pod/container", and says whether the kubelet listed
	// devices prepared for its claims. A kubelet whose
	// KubeletPodResourcesDynamicResources feature is off (alpha before
	// Kubernetes 1.34, beta and on by default since) lists none even for
	// containers that use claims: DynamicResourcesCondition tells that
	// apart from a container without claims, which the API's pod spec
	// shows.
	DynamicResources map[string]bool
}

// ListGPUAllocations asks the kubelet's pod-resources API, served on the
// unix socket socketPath, which devices of resourceName (device plugin)
// and which devices of draDriver (DRA; "" for none) each container holds.
// Containers holding none are left out of the allocations.
func ListGPUAllocations(ctx context.Context, socketPath, resourceName, draDriver string) (*PodResources, error) {
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
	return ReadPodResources(resp, resourceName, draDriver), nil
}

// ReadPodResources reads a pod-resources List answer: see
// ListGPUAllocations.
func ReadPodResources(resp *podresourcesv1.ListPodResourcesResponse, resourceName, draDriver string) *PodResources {
	out := &PodResources{DynamicResources: map[string]bool{}}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == resourceName {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			var claimed []ClaimDevice
			for _, dr := range c.GetDynamicResources() {
				for _, r := range dr.GetClaimResources() {
					if draDriver == "" || r.GetDriverName() != draDriver {
						continue
					}
					claimed = append(claimed, ClaimDevice{
						Claim: dr.GetClaimNamespace() + "/" + dr.GetClaimName(),
						Pool:  r.GetPoolName(), Device: r.GetDeviceName(),
					})
				}
			}
			out.DynamicResources[pod.GetNamespace()+"/"+pod.GetName()+"/"+c.GetName()] = len(c.GetDynamicResources()) > 0
			if len(ids) == 0 && len(claimed) == 0 {
				continue
			}
			out.Allocations = append(out.Allocations, Allocation{
				Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: c.GetName(),
				DeviceIDs: ids, ClaimDevices: claimed,
			})
		}
	}
	sort.Slice(out.Allocations, func(i, j int) bool {
		a, b := out.Allocations[i], out.Allocations[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Container < b.Container
	})
	return out
}

// ResolveClaimDevices returns allocs with the GPUs of their claim devices
// in node's pool added, through gpuOf (device name to NVML index, the
// join of the node's ResourceSlice to its GPUs by UUID). It also returns
// the devices it could not resolve: another pool's, or one the join does
// not know (a MIG device, a slice not published yet).
func ResolveClaimDevices(allocs []Allocation, node string, gpuOf map[string]int) (resolved []Allocation, unresolved []string) {
	resolved = make([]Allocation, len(allocs))
	for i, a := range allocs {
		a.GPUs = append([]int(nil), a.GPUs...)
		seen := topology.GPUSet(0)
		for _, g := range a.GPUs {
			seen |= topology.NewGPUSet(g)
		}
		for _, d := range a.ClaimDevices {
			g, ok := gpuOf[d.Device]
			if d.Pool != node || !ok || g < 0 || g >= topology.MaxGPUs {
				unresolved = append(unresolved, d.Pool+"/"+d.Device)
				continue
			}
			a.GPUs = appendGPU(a.GPUs, &seen, g)
		}
		sort.Ints(a.GPUs)
		resolved[i] = a
	}
	return resolved, unresolved
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
		a.ClaimDevices = append([]ClaimDevice(nil), a.ClaimDevices...)
		a.GPUs = nil
		seen := topology.GPUSet(0)
		for _, id := range a.DeviceIDs {
			g, ok := gpuOfDeviceID(id, byUUID, len(gpus))
			if !ok {
				unresolved = append(unresolved, id)
				continue
			}
			a.GPUs = appendGPU(a.GPUs, &seen, g)
		}
		sort.Ints(a.GPUs)
		resolved[i] = a
	}
	return resolved, unresolved
}

// appendGPU appends GPU g to gpus unless seen has it: a GPU shared by
// replicas or named by two devices counts once.
func appendGPU(gpus []int, seen *topology.GPUSet, g int) []int {
	if seen.Has(g) {
		return gpus
	}
	*seen |= topology.NewGPUSet(g)
	return append(gpus, g)
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
