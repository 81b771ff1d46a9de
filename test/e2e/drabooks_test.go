package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestDRABooksFollowTheClaims: on one DRA HGX node whose kubelet does not
// report the devices it prepares for claims (as before Kubernetes 1.34),
// so that its agent reports no DRA allocation and says so on the
// NodeTopology, and only the claims tell which GPUs are held:
//
//  1. gang "open" of two 2-GPU members is planned on the node, member 0 on
//     gpu-0,1 and member 1 on gpu-2,3, and member 1 cannot take its slot:
//     the host port it asks for is in use there, which the planner does
//     not see. The gang's slots stay open (member 0 waits at Permit or is
//     turned away with it, and the gang is planned again);
//  2. a 2-GPU gang "fast" is planned beside the slots, on gpu-4,5, but the
//     allocator, which does not see them, gives its claim two of gpu-0..3;
//     the pod's lockstep.dev/gpus annotation says what it got;
//  3. "open" goes. Six GPUs are then free in the claims and in
//     `kubectl lockstep topology`, and in the scheduler: a 6-GPU gang runs
//     on them. When the books kept the plan's prediction for "fast", the
//     scheduler saw four free and that gang waited until "fast" ended.
func TestDRABooksFollowTheClaims(t *testing.T) {
	ctx := context.Background()
	node := addDRANodesWith(t, cluster, "dra-books", "hgx-h100", 1, 1, func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[lockstep.AnnotationSimulatedKubeletWithoutDynamicResources] = "true"
	})[0]
	ns := cluster.NewNamespace(t)
	onNode := func(pod *corev1.Pod) {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	const port = 29400

	// A pod bound to the node holding the host port.
	blocker := utiltesting.MakePod("port-holder", ns).Obj()
	blocker.Spec.NodeName = node
	blocker.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}
	cluster.CreatePods(t, blocker)

	createDRAGangOf(t, ns, "open", 2, 2, func(pod *corev1.Pod) {
		onNode(pod)
		if pod.Name == "open-1" {
			pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}
		}
	})
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "open-1 turned away from its slot", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, "open-1", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, c := podutil.GetPodConditionFromList(p.Status.Conditions, corev1.PodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "port"), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	createDRAGangOf(t, ns, "fast", 1, 2, onNode)
	fast := waitGangBound(t, ns, "fast", 1, time.Minute)[0]
	// The plan, seeing gpu-0..3 held by open's slots, predicts gpu-4,5;
	// the allocator takes the first two free devices, in the slots.
	fastDevices := claimDevices(t, ns, fast.Name)
	if len(fastDevices) != 2 || !slices.Contains([]string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, fastDevices[0]) {
		t.Fatalf("fast's claim holds %v, want two of gpu-0..3: the allocator's first free devices, which open's slots hold in the plan", fastDevices)
	}
	if got, want := fast.Annotations[lockstep.AnnotationGPUs], gpuList(fastDevices); got != want {
		t.Errorf("fast's %s = %q, want the GPUs its claim holds, %s", lockstep.AnnotationGPUs, got, want)
	}
	// The agent sees the running pod use a claim and the kubelet list no
	// device for it.
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "NodeTopology saying the kubelet omits claims' devices", func(ctx context.Context) (bool, error) {
		nt := &v1alpha1.NodeTopology{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: node}, nt); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(nt.Status.Conditions, v1alpha1.NodeTopologyDynamicResourcesReported)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonKubeletOmitsDynamicResources &&
			nt.Status.FreeGPUs == 8 && len(nt.Status.Allocations) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// "open" goes, its slot with it.
	if err := cluster.Client.Delete(ctx, &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "open"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"open-0", "open-1"} {
		if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}

	// kubectl lockstep topology counts the claims, not the blind agent.
	err = localcluster.Poll(ctx, time.Second, time.Minute, "kubectl lockstep topology showing the claims", func(context.Context) (bool, error) {
		gpus, free := hostCapacity(t, node)
		return gpus == 8 && free == 6, nil
	})
	if err != nil {
		gpus, free := hostCapacity(t, node)
		t.Fatalf("%v: kubectl lockstep topology shows %d GPUs, %d free; the claims hold 2 of 8", err, gpus, free)
	}

	createDRAGangOf(t, ns, "after", 1, 6, onNode)
	after := waitGangBound(t, ns, "after", 1, 90*time.Second)[0]
	var rest []string
	for i := range 8 {
		if d := fmt.Sprintf("gpu-%d", i); !slices.Contains(fastDevices, d) {
			rest = append(rest, d)
		}
	}
	if got := claimDevices(t, ns, after.Name); !slices.Equal(got, rest) {
		t.Errorf("after's claim holds %v, want every device but fast's: %v", got, rest)
	}
	if got, want := after.Annotations[lockstep.AnnotationGPUs], gpuList(rest); got != want {
		t.Errorf("after's %s = %q, want %s", lockstep.AnnotationGPUs, got, want)
	}
	if gpus, free := hostCapacity(t, node); gpus != 8 || free != 0 {
		t.Errorf("kubectl lockstep topology shows %d GPUs, %d free with every device claimed, want 8 and 0", gpus, free)
	}
}

// gpuList is the lockstep.dev/gpus form of the fake driver's devices
// gpu-<i>, GPU i of the node.
func gpuList(devices []string) string {
	var gpus []string
	for _, d := range devices {
		gpus = append(gpus, strings.TrimPrefix(d, "gpu-"))
	}
	return strings.Join(gpus, ",")
}

// claimDevices returns the gpu.nvidia.com devices pod's one claim was
// allocated, sorted.
func claimDevices(t *testing.T, ns, pod string) []string {
	t.Helper()
	var devices []string
	for _, r := range waitClaimAllocated(t, ns, pod, 30*time.Second) {
		if r.Driver == lockstep.DRAGPUDriver {
			devices = append(devices, r.Device)
		}
	}
	slices.Sort(devices)
	return devices
}

// hostCapacity is node's GPUs and free GPUs as `kubectl lockstep topology
// --level host` shows them.
func hostCapacity(t *testing.T, node string) (gpus, free int) {
	t.Helper()
	var out struct {
		Domains []struct {
			Name string `json:"name"`
			GPUs int    `json:"gpus"`
			Free int    `json:"free"`
		} `json:"domains"`
	}
	data := kubectlLockstep(t, "topology", "--level", "host", "-l", corev1.LabelHostname+"="+node, "-o", "json")
	if err := json.Unmarshal([]byte(data), &out); err != nil {
		t.Fatalf("decoding topology output: %v\n%s", err, data)
	}
	if len(out.Domains) != 1 {
		t.Fatalf("topology of node %s: %d domains, want 1\n%s", node, len(out.Domains), data)
	}
	if diff := cmp.Diff(node, out.Domains[0].Name); diff != "" {
		t.Fatalf("topology host (-want,+got):\n%s", diff)
	}
	return out.Domains[0].GPUs, out.Domains[0].Free
}
