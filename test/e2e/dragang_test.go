package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// addDRANodes adds n HGX H100 nodes whose GPUs NVIDIA's DRA driver serves
// (as the mixed-dra model's DRA pools) to the suite's cluster: see
// addDRANodesTo.
func addDRANodes(t *testing.T, pool string, n, perLeaf int) []string {
	t.Helper()
	return addDRANodesTo(t, cluster, pool, "hgx-h100", n, perLeaf)
}

// addDRANodesTo adds n nodes of profile whose GPUs NVIDIA's DRA driver
// serves to c, perLeaf to a domain of the model's first level in domains of
// their own (a leaf, or a clique where the first level is one) under the
// model's first domains above, and waits until the fake agent published
// each one's ResourceSlice and NodeTopology. They are deleted when the
// test ends.
func addDRANodesTo(t *testing.T, c *framework.Cluster, pool, profile string, n, perLeaf int) []string {
	t.Helper()
	return addDRANodesWith(t, c, pool, profile, n, perLeaf, nil)
}

// addDRANodesWith is addDRANodesTo with each node changed by change (nil
// for none) before it is created.
func addDRANodesWith(t *testing.T, c *framework.Cluster, pool, profile string, n, perLeaf int, change func(*corev1.Node)) []string {
	t.Helper()
	ctx := context.Background()
	model := *c.Model
	p := clustermodel.Pool{Name: pool, Profile: profile, GPUDriver: lockstep.GPUDriverDRA, Nodes: n,
		NodesPerDomain: map[string]int{}, FirstDomain: map[string]int{}}
	for i, l := range model.Levels {
		p.NodesPerDomain[l.Name] = n
		if i == 0 {
			p.NodesPerDomain[l.Name] = perLeaf
			// Past the model's own domains.
			p.FirstDomain[l.Name] = 90
		} else {
			p.FirstDomain[l.Name] = 0
		}
	}
	prof, ok := topology.LookupProfile(profile)
	if !ok {
		t.Fatalf("no profile %s", profile)
	}
	hw, err := prof.Node()
	if err != nil {
		t.Fatal(err)
	}
	model.Pools = []clustermodel.Pool{p}
	nodes := model.Nodes()
	if change != nil {
		for _, node := range nodes {
			change(node)
		}
	}
	if err := c.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteNodes(ctx, nodes) })
	var names []string
	for _, node := range nodes {
		names = append(names, node.Name)
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "ResourceSlice and NodeTopology of "+node.Name, func(ctx context.Context) (bool, error) {
			if c.Client.Get(ctx, client.ObjectKey{Name: agent.GPUSliceName(node.Name)}, &resourcev1.ResourceSlice{}) != nil {
				return false, nil
			}
			nt := &v1alpha1.NodeTopology{}
			return c.Client.Get(ctx, client.ObjectKey{Name: node.Name}, nt) == nil && int(nt.Status.FreeGPUs) == hw.NumGPUs(), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// createDRAGang creates a PodGroup of members pods that each claim gpus
// GPUs through a ResourceClaimTemplate of DeviceClass gpu.nvidia.com.
func createDRAGang(t *testing.T, ns, name string, members int, gpus int64) {
	t.Helper()
	createDRAGangOf(t, ns, name, members, gpus, nil)
}

// createDRAGangOf is createDRAGang with each pod changed by change (nil
// for none) before it is created.
func createDRAGangOf(t *testing.T, ns, name string, members int, gpus int64, change func(*corev1.Pod)) {
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
		pod := draMember(ns, name, fmt.Sprintf("%s-%d", name, i))
		if change != nil {
			change(pod)
		}
		cluster.CreatePods(t, pod)
	}
}

// draMember is pod name of createDRAGang's gang: a member of PodGroup
// gang claiming its GPUs from the gang's template.
func draMember(ns, gang, name string) *corev1.Pod {
	pod := utiltesting.MakePod(name, ns).SchedulerName(localcluster.SchedulerName).PodGroup(gang).Obj()
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(gang)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	return pod
}

// draDevice is an allocated device.
type draDevice struct{ pool, device string }

// waitClaimAllocated waits until the one claim of pod is allocated, and
// returns its allocation's results.
func waitClaimAllocated(t *testing.T, ns, pod string, timeout time.Duration) []resourcev1.DeviceRequestAllocationResult {
	t.Helper()
	var results []resourcev1.DeviceRequestAllocationResult
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, timeout, "claim of "+pod+" allocated", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
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
	return results
}

// checkClaimsOnOwnNodes checks that every bound pod's GPU claim is
// allocated gpus gpu.nvidia.com devices of its own node's pool, and
// returns the devices by pod.
func checkClaimsOnOwnNodes(t *testing.T, ns string, pods []corev1.Pod, gpus int) map[string][]draDevice {
	t.Helper()
	out := map[string][]draDevice{}
	for _, pod := range pods {
		results := waitClaimAllocated(t, ns, pod.Name, 30*time.Second)
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

// waitPlacementWithDevices waits until job's status.placement is rated and
// lists the devices of members pods, and returns it.
func waitPlacementWithDevices(t *testing.T, c *framework.Cluster, job *v1alpha1.TrainingJob, members int, extra func(*v1alpha1.TrainingJob) bool) *v1alpha1.Placement {
	t.Helper()
	var j v1alpha1.TrainingJob
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, 2*time.Minute, "status.placement of "+job.Name+" rated, with every member's devices", func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err
		}
		pl := j.Status.Placement
		return pl != nil && pl.Efficiency != "" && len(pl.Devices) == members && (extra == nil || extra(&j)), nil
	})
	if err != nil {
		t.Fatalf("%v; conditions %+v, placement %+v", err, j.Status.Conditions, j.Status.Placement)
	}
	return j.Status.Placement
}

// checkPlacementDevices checks that status.placement lists, for each of
// the job's pods, its node and exactly the devices its claims were
// allocated, and returns the pods.
func checkPlacementDevices(t *testing.T, c *framework.Cluster, job *v1alpha1.TrainingJob, pl *v1alpha1.Placement) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{lockstep.LabelJobName: job.Name}); err != nil {
		t.Fatal(err)
	}
	var want []v1alpha1.PodDevices
	for _, p := range pods.Items {
		d := v1alpha1.PodDevices{Pod: p.Name, Node: p.Spec.NodeName}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			claim := &resourcev1.ResourceClaim{}
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: *st.ResourceClaimName}, claim); err != nil {
				t.Fatalf("claim %s of pod %s: %v", *st.ResourceClaimName, p.Name, err)
			}
			if claim.Status.Allocation == nil {
				t.Fatalf("claim %s of running pod %s is not allocated", claim.Name, p.Name)
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				d.Devices = append(d.Devices, r.Driver+"/"+r.Pool+"/"+r.Device)
			}
		}
		slices.Sort(d.Devices)
		want = append(want, d)
	}
	slices.SortFunc(want, func(a, b v1alpha1.PodDevices) int { return strings.Compare(a.Pod, b.Pod) })
	if diff := cmp.Diff(want, pl.Devices); diff != "" {
		t.Errorf("status.placement.devices against the pods' claims (-want,+got):\n%s", diff)
	}
	return pods.Items
}

// TestDRATrainingJobPlacement: a TrainingJob whose replicas claim 8 GPUs
// each through a ResourceClaimTemplate runs on two DRA nodes of a leaf;
// its status.placement lists every member's node and the very devices its
// claim was allocated, 8 GPUs of its own node, and is rated on those GPUs
// (two whole nodes of one leaf, the best placement of 16 GPUs: 1.000).
// Before the controller counted GPU claims, a DRA member counted as asking
// for no GPUs and the placement was not rated.
func TestDRATrainingJobPlacement(t *testing.T) {
	nodes := addDRANodes(t, "dra-tj", 2, 2)
	ns := cluster.NewNamespace(t)
	if err := cluster.Client.Create(context.Background(), utiltesting.MakeGPUClaimTemplate("gpus", ns, 8)); err != nil {
		t.Fatal(err)
	}
	tpl := utiltesting.MakePodTemplate("pytorch").NoGracePeriod().CPU("1").GPUClaim("gpus").Obj()
	job := pytorchGang(ns, "dra-tj", 1, tpl).Obj()
	createJob(t, job)

	pl := waitPlacementWithDevices(t, cluster, job, 2, nil)
	pods := checkPlacementDevices(t, cluster, job, pl)
	for _, p := range pods {
		if !slices.Contains(nodes, p.Spec.NodeName) {
			t.Errorf("pod %s on %s, not one of the DRA nodes %v", p.Name, p.Spec.NodeName, nodes)
		}
	}
	for _, d := range pl.Devices {
		gpus := 0
		for _, dev := range d.Devices {
			if strings.HasPrefix(dev, lockstep.DRAGPUDriver+"/"+d.Node+"/") {
				gpus++
			}
		}
		if gpus != 8 {
			t.Errorf("pod %s holds %v, want 8 GPUs of its node %s", d.Pod, d.Devices, d.Node)
		}
	}
	if pl.Efficiency != "1.000" || pl.LevelName != "leaf" {
		t.Errorf("placement rated %s at level %s (%s), want 1.000 in one leaf", pl.Efficiency, pl.LevelName, pl.Reason)
	}
}

// TestDRAPlacementWhenClaimWatchLags runs the controller behind the fault
// proxy, which holds every event of its ResourceClaim watch 8 s, as a
// watch on a loaded apiserver can lag the others: the gang is bound and
// runs, and the agents report its GPUs, before the controller sees a claim
// allocated. Its status.placement still ends listing every member's
// devices as their claims were allocated, and rated: the claim's own event
// wakes the job. Before the controller watched claims, the placement kept
// the devices the cache held at the last pod or NodeTopology event, none
// here, and nothing woke the job again (CI's TestComputeDomainGB200 DRA
// subtest failed so once, under load).
func TestDRAPlacementWhenClaimWatchLags(t *testing.T) {
	proxy, err := framework.StartFaultProxy(cluster.Config, framework.FaultRules{
		WatchDelay: map[string]time.Duration{"resourceclaims": 8 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	runComponentsBehindProxy(t, proxy, "controller")
	nodes := addDRANodes(t, "dra-lag", 2, 2)
	ns := cluster.NewNamespace(t)
	if err := cluster.Client.Create(context.Background(), utiltesting.MakeGPUClaimTemplate("gpus", ns, 8)); err != nil {
		t.Fatal(err)
	}
	tpl := utiltesting.MakePodTemplate("pytorch").NoGracePeriod().CPU("1").GPUClaim("gpus").Obj()
	job := pytorchGang(ns, "dra-lag", 1, tpl).Obj()
	createJob(t, job)

	pl := waitPlacementWithDevices(t, cluster, job, 2, nil)
	for _, p := range checkPlacementDevices(t, cluster, job, pl) {
		if !slices.Contains(nodes, p.Spec.NodeName) {
			t.Errorf("pod %s on %s, not one of the DRA nodes %v", p.Name, p.Spec.NodeName, nodes)
		}
	}
	if n := proxy.Counts()[framework.FaultWatchDelayed]; n == 0 {
		t.Error("the controller's claim watch was never delayed")
	}
}
