package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// addDRANodes adds n HGX H100 nodes whose GPUs NVIDIA's DRA driver serves
// (as the mixed-dra model's DRA pools), perLeaf to a leaf in leaves of
// their own under the model's first spine, and waits until the fake agent
// published each one's ResourceSlice and NodeTopology. They are deleted
// when the test ends.
func addDRANodes(t *testing.T, pool string, n, perLeaf int) []string {
	t.Helper()
	ctx := context.Background()
	model := *cluster.Model
	p := clustermodel.Pool{Name: pool, Profile: "hgx-h100", GPUDriver: lockstep.GPUDriverDRA, Nodes: n,
		NodesPerDomain: map[string]int{}, FirstDomain: map[string]int{}}
	for i, l := range model.Levels {
		p.NodesPerDomain[l.Name] = n
		if i == 0 {
			p.NodesPerDomain[l.Name] = perLeaf
			// Past the model's own leaves.
			p.FirstDomain[l.Name] = 90
		} else {
			p.FirstDomain[l.Name] = 0
		}
	}
	model.Pools = []clustermodel.Pool{p}
	nodes := model.Nodes()
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	var names []string
	for _, node := range nodes {
		names = append(names, node.Name)
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "ResourceSlice of "+node.Name, func(ctx context.Context) (bool, error) {
			return cluster.Client.Get(ctx, client.ObjectKey{Name: agent.GPUSliceName(node.Name)}, &resourcev1.ResourceSlice{}) == nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		waitNodeTopology(t, node.Name, "published", func(nt *v1alpha1.NodeTopology) bool { return nt.Status.FreeGPUs == 8 })
	}
	return names
}

// createDRAGang creates a PodGroup of members pods that each claim gpus
// GPUs through a ResourceClaimTemplate of DeviceClass gpu.nvidia.com.
func createDRAGang(t *testing.T, ns, name string, members int, gpus int64) {
	t.Helper()
	ctx := context.Background()
	template := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: gpus}}},
		}}},
	}
	if err := cluster.Client.Create(ctx, template); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Client.Create(ctx, utiltesting.MakePodGroup(name, ns, int32(members)).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range members {
		pod := utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj()
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &template.Name}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		cluster.CreatePods(t, pod)
	}
}

// draDevice is an allocated device.
type draDevice struct{ pool, device string }

// checkClaimsOnOwnNodes checks that every bound pod's GPU claim is
// allocated gpus gpu.nvidia.com devices of its own node's pool, and
// returns the devices by pod.
func checkClaimsOnOwnNodes(t *testing.T, ns string, pods []corev1.Pod, gpus int) map[string][]draDevice {
	t.Helper()
	out := map[string][]draDevice{}
	for _, pod := range pods {
		var results []resourcev1.DeviceRequestAllocationResult
		err := localcluster.Poll(context.Background(), 200*time.Millisecond, 30*time.Second, "claim of "+pod.Name+" allocated", func(ctx context.Context) (bool, error) {
			p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				return false, nil
			}
			claim := &resourcev1.ResourceClaim{}
			if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}, claim); err != nil || claim.Status.Allocation == nil {
				return false, nil
			}
			results = claim.Status.Allocation.Devices.Results
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != gpus {
			t.Errorf("pod %s's claim got %d devices, want %d", pod.Name, len(results), gpus)
		}
		for _, r := range results {
			if r.Driver != lockstep.DRAGPUDriver || r.Pool != pod.Spec.NodeName {
				t.Errorf("pod %s on %s got device %s/%s/%s, not one of its node's GPUs", pod.Name, pod.Spec.NodeName, r.Driver, r.Pool, r.Device)
			}
			out[pod.Name] = append(out[pod.Name], draDevice{r.Pool, r.Device})
		}
	}
	return out
}

// allocatedClaims counts the namespace's claims that are allocated.
func allocatedClaims(ctx context.Context, ns string) (int, error) {
	var claims resourcev1.ResourceClaimList
	if err := cluster.Client.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			n++
		}
	}
	return n, nil
}

// draRounds is how many rounds TestDRAGangsRunWholeOnTheirNodes runs.
const draRounds = 20

// TestDRAGangsRunWholeOnTheirNodes: on eight DRA HGX nodes in two leaves
// (64 GPUs), three DRA gangs compete, draRounds times: two of 4x8 (a leaf
// each) and one of 4x4. In each round exactly two run whole, TopologyPlacement
// planned them (their PodGroup records the placement), a 4x8 gang sits in
// one leaf, the third gang holds nothing, every claim is allocated to
// devices of its own pod's node, and no device is given twice.
func TestDRAGangsRunWholeOnTheirNodes(t *testing.T) {
	ctx := context.Background()
	dra := addDRANodes(t, "dra-b", 8, 4)
	leafOf := map[string]string{}
	for _, name := range dra {
		node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leafOf[name] = node.Labels[leafLabel]
	}
	type gang struct {
		name          string
		members, gpus int
	}
	gangs := []gang{{"a", 4, 8}, {"b", 4, 4}, {"c", 4, 8}}
	for round := range draRounds {
		ns := cluster.NewNamespace(t)
		for _, g := range gangs {
			createDRAGang(t, ns, g.name, g.members, int64(g.gpus))
		}
		// Members of a gang are bound one by one after its Permit: wait
		// until two gangs are bound whole.
		var bound map[string][]corev1.Pod
		err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "two gangs bound whole", func(ctx context.Context) (bool, error) {
			bound = map[string][]corev1.Pod{}
			whole := 0
			for _, g := range gangs {
				pods, err := gangPods(ctx, ns, g.name)
				if err != nil {
					return false, nil
				}
				if b := framework.BoundPods(pods); len(b) > 0 {
					bound[g.name] = b
					if len(b) == g.members {
						whole++
					}
				}
			}
			return whole == 2, nil
		})
		if err != nil {
			t.Fatalf("round %d: %v: bound %v", round, err, bound)
		}
		seen := map[draDevice]string{}
		for _, g := range gangs {
			pods, ok := bound[g.name]
			if !ok {
				continue
			}
			if len(pods) != g.members {
				t.Errorf("round %d: gang %s has %d of %d members bound", round, g.name, len(pods), g.members)
			}
			for pod, devices := range checkClaimsOnOwnNodes(t, ns, pods, g.gpus) {
				for _, d := range devices {
					if other, taken := seen[d]; taken {
						t.Errorf("round %d: device %s/%s given to %s and %s", round, d.pool, d.device, other, pod)
					}
					seen[d] = pod
				}
			}
			leaves := map[string]bool{}
			for _, pod := range pods {
				if !strings.HasPrefix(pod.Spec.NodeName, "dra-b-") {
					t.Errorf("round %d: DRA pod %s bound to %s, not a DRA node of %v", round, pod.Name, pod.Spec.NodeName, dra)
				}
				leaves[leafOf[pod.Spec.NodeName]] = true
			}
			if g.gpus == 8 && len(leaves) != 1 {
				t.Errorf("round %d: gang %s of %dx%d spans leaves %v, want one", round, g.name, g.members, g.gpus, leaves)
			}
			checkPlanned(t, ns, g.name)
		}
		// The third gang stays whole: none of its members is bound.
		for _, g := range gangs {
			if _, ok := bound[g.name]; !ok {
				pods, err := gangPods(ctx, ns, g.name)
				if err != nil {
					t.Fatal(err)
				}
				if b := framework.BoundPods(pods); len(b) != 0 {
					t.Errorf("round %d: gang %s, which did not fit, has %d members bound", round, g.name, len(b))
				}
			}
		}
		if t.Failed() {
			return
		}
		deletePods(t, ns)
		waitDRANodesFree(t, dra)
	}
}

// checkPlanned checks that TopologyPlacement planned the gang: it records
// the placement on the PodGroup when the gang's first member reaches
// PreBind.
func checkPlanned(t *testing.T, ns, gang string) {
	t.Helper()
	pg := &schedv1alpha1.PodGroup{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, 30*time.Second, "placement of "+gang+" recorded", func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: gang}, pg); err != nil {
			return false, nil
		}
		return pg.Annotations[lockstep.AnnotationPlacementDomain] != "", nil
	})
	if err != nil {
		t.Errorf("%v: annotations %v", err, pg.Annotations)
	}
}

// waitDRANodesFree waits until the agent reports every GPU of the nodes
// free again.
func waitDRANodesFree(t *testing.T, nodes []string) {
	t.Helper()
	for _, node := range nodes {
		waitNodeTopology(t, node, "every GPU free", func(nt *v1alpha1.NodeTopology) bool { return nt.Status.FreeGPUs == 8 })
	}
}

// TestDRAGangThatCannotAllBeAllocatedLeavesNone: a gang of five 8-GPU DRA
// members on four DRA nodes, and a gang whose minMember is more than its
// pods could fit beside a running gang: none of their pods is bound and no
// claim is allocated.
func TestDRAGangThatCannotAllBeAllocatedLeavesNone(t *testing.T) {
	ctx := context.Background()
	addDRANodes(t, "dra-d", 4, 4)
	ns := cluster.NewNamespace(t)
	createDRAGang(t, ns, "running", 2, 8)
	waitGangBound(t, ns, "running", 2, 2*time.Minute)
	createDRAGang(t, ns, "five", 5, 8)
	createDRAGang(t, ns, "three", 3, 8)
	waitGangRejected(t, ns, "five", 5)
	waitGangRejected(t, ns, "three", 3)
	// Every member has been tried and turned away; the check below means
	// something once each member's claim exists (kube-controller-manager
	// makes it from the template): 2 running, 5 and 3 turned away.
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "every member's claim created", func(ctx context.Context) (bool, error) {
		var claims resourcev1.ResourceClaimList
		if err := cluster.Client.List(ctx, &claims, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		return len(claims.Items) == 2+5+3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"five", "three"} {
		pods, err := gangPods(ctx, ns, g)
		if err != nil {
			t.Fatal(err)
		}
		if b := framework.BoundPods(pods); len(b) != 0 {
			t.Errorf("gang %s has %d members bound", g, len(b))
		}
	}
	if n, err := allocatedClaims(ctx, ns); err != nil || n != 2 {
		t.Errorf("%d claims allocated (err %v), want only the running gang's 2", n, err)
	}
}

// TestDevicePluginAndDRAGangsSideBySide: in one cluster, a gang asking for
// nvidia.com/gpu and a gang claiming gpu.nvidia.com GPUs, created together,
// each land on their own kind of node: the device-plugin gang on the
// model's HGX nodes, the DRA gang on the DRA nodes with its claims
// allocated there.
func TestDevicePluginAndDRAGangsSideBySide(t *testing.T) {
	dra := addDRANodes(t, "dra-e", 2, 2)
	ns := cluster.NewNamespace(t)
	createGang(t, ns, "plugin", 2, 8, nil)
	createDRAGang(t, ns, "claims", 2, 8)
	isDRA := map[string]bool{}
	for _, n := range dra {
		isDRA[n] = true
	}
	for _, pod := range waitGangBound(t, ns, "plugin", 2, 2*time.Minute) {
		if isDRA[pod.Spec.NodeName] {
			t.Errorf("device-plugin pod %s bound to DRA node %s", pod.Name, pod.Spec.NodeName)
		}
	}
	pods := waitGangBound(t, ns, "claims", 2, 2*time.Minute)
	for _, pod := range pods {
		if !isDRA[pod.Spec.NodeName] {
			t.Errorf("DRA pod %s bound to device-plugin node %s", pod.Name, pod.Spec.NodeName)
		}
	}
	checkClaimsOnOwnNodes(t, ns, pods, 8)
	checkPlanned(t, ns, "claims")
}
