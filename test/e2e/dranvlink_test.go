package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// nvlinkTaint keeps other tests' pods off TestDRAPodGetsNVLinkSet's node.
const nvlinkTaint = "lockstep.dev/e2e-dra-nvlink"

// TestDRAPodGetsNVLinkSet is issue 28's acceptance (c): on a DRA DGX-1
// (GPUs 0-3 and 4-7 NVLink quads, one PCIe root each) whose GPU 0 a
// one-GPU claim holds, a plain pod's 4-GPU claim from the user's template
// gets the allocator's first free devices, 1-4, which NVLink does not
// connect; a one-replica TrainingJob with the same template claims from
// the job's one-PCIe-root-first copy and gets the 4-7 quad, through the
// constraint's alternative, and the scheduler's GPU annotation and the
// job's placement name the same GPUs.
func TestDRAPodGetsNVLinkSet(t *testing.T) {
	ctx := context.Background()
	node, nt, slice := addDGX1DRANode(t)
	hw, err := nt.Spec.ToTopology()
	if err != nil {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t)
	for name, gpus := range map[string]int64{"one": 1, "four": 4} {
		tmpl := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: lockstep.DRAGPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: gpus}}},
			}}},
		}
		if err := cluster.Client.Create(ctx, tmpl); err != nil {
			t.Fatal(err)
		}
	}

	// GPU 0 taken: the allocator's first free device is GPU 1.
	cluster.CreatePods(t, nvlinkPod(ns, "hold", node, "one"))
	if held, _ := claimedGPUs(t, ns, "hold", slice, hw); held != topology.NewGPUSet(0) {
		t.Fatalf("the one-GPU claim got GPUs %v, want 0", held)
	}

	t.Run("the template as written gets PCIe-crossing GPUs", func(t *testing.T) {
		cluster.CreatePods(t, nvlinkPod(ns, "plain", node, "four"))
		got, _ := claimedGPUs(t, ns, "plain", slice, hw)
		if got.Len() != 4 || hw.NVLinkConnected(got) {
			t.Errorf("the unconstrained 4-GPU claim got GPUs %v (NVLink-connected %t), want 4 GPUs NVLink does not connect", got, hw.NVLinkConnected(got))
		}
		grace := int64(0)
		if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, "plain", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the plain pod's claim released", func(ctx context.Context) (bool, error) {
			n, err := allocatedClaims(ctx, ns)
			return err == nil && n == 1, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		waitNodeTopology(t, node, "7 GPUs free", func(nt *v1alpha1.NodeTopology) bool { return nt.Status.FreeGPUs == 7 })
	})

	t.Run("a TrainingJob's claim gets an NVLink-connected set", func(t *testing.T) {
		tpl := nvlinkPod(ns, "", node, "four")
		job := utiltesting.MakeTrainingJob("nvl", ns).Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, corev1.PodTemplateSpec{Spec: tpl.Spec}).RunPolicy(v1alpha1.RunPolicy{}).Obj()
		createJob(t, job)
		pod := job.Name + "-master-0"
		waitBound(t, ns, pod)
		got, res := claimedGPUs(t, ns, pod, slice, hw)
		if got.Len() != 4 || !hw.NVLinkConnected(got) {
			t.Errorf("the job's 4-GPU claim got GPUs %v, want 4 NVLink-connected", got)
		}
		for _, r := range res {
			if want := "gpus/" + gpuclaim.OneRootSubrequest; r.Request != want {
				t.Errorf("device %s allocated for request %s, want %s", r.Device, r.Request, want)
			}
		}
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := p.Spec.ResourceClaims; len(c) != 1 || c[0].ResourceClaimTemplateName == nil || *c[0].ResourceClaimTemplateName != "nvl-four-one-root" {
			t.Errorf("pod claims %+v, want one from the job's copy nvl-four-one-root", c)
		}
		if a := p.Annotations[lockstep.AnnotationGPUs]; a != got.List() {
			t.Errorf("pod annotation %s=%q, the claim's GPUs are %q", lockstep.AnnotationGPUs, a, got.List())
		}
		// The scheduler rated its plan, the predicted set, as the NVLink
		// quad it is.
		checkPlanned(t, ns, job.Name)
		pg := &schedv1alpha1.PodGroup{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name}, pg); err != nil {
			t.Fatal(err)
		}
		if e := pg.Annotations[lockstep.AnnotationPlacementEfficiency]; e != "1.000" {
			t.Errorf("PodGroup %s=%q (%s), want 1.000: an NVLink quad", lockstep.AnnotationPlacementEfficiency, e, pg.Annotations[lockstep.AnnotationPlacementReason])
		}
		j := waitJob(t, ns, job.Name, time.Minute, "the job's placement", func(j *v1alpha1.TrainingJob) bool { return j.Status.Placement != nil })
		// The controller rates a job from its pods' GPU annotations; one
		// whose pods claim GPUs is rated where the controller reads their
		// claims, and must then agree.
		if pl := j.Status.Placement; !slices.Equal(pl.Nodes, []string{node}) || (pl.Efficiency != "" && pl.Efficiency != "1.000") {
			t.Errorf("status.placement nodes %v efficiency %q (%s), want [%s] rated 1.000 as an NVLink quad", pl.Nodes, pl.Efficiency, pl.Reason, node)
		}
	})
}

// addDGX1DRANode adds a tainted DGX-1 node whose GPUs NVIDIA's DRA driver
// serves, in a leaf of its own, and waits for its ResourceSlice and
// NodeTopology. It is deleted when the test ends.
func addDGX1DRANode(t *testing.T) (string, *v1alpha1.NodeTopology, *resourcev1.ResourceSlice) {
	t.Helper()
	ctx := context.Background()
	model := *cluster.Model
	p := clustermodel.Pool{Name: "dra-nvl", Profile: "dgx1-v100", GPUDriver: lockstep.GPUDriverDRA, Nodes: 1,
		NodesPerDomain: map[string]int{}, FirstDomain: map[string]int{}}
	for i, l := range model.Levels {
		p.NodesPerDomain[l.Name] = 1
		if i == 0 {
			p.FirstDomain[l.Name] = 95
		}
	}
	model.Pools = []clustermodel.Pool{p}
	nodes := model.Nodes()
	nodes[0].Spec.Taints = []corev1.Taint{{Key: nvlinkTaint, Effect: corev1.TaintEffectNoSchedule}}
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	node := nodes[0].Name
	slice := waitGPUSlice(t, node)
	nt := waitNodeTopology(t, node, "published", func(nt *v1alpha1.NodeTopology) bool { return nt.Status.FreeGPUs == 8 })
	return node, nt, slice
}

// nvlinkPod is a pod on node whose container claims GPUs from template.
func nvlinkPod(ns, name, node, template string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: lockstep.SchedulerName,
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			Tolerations:   []corev1.Toleration{{Key: nvlinkTaint, Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "pytorch", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &template}},
		},
	}
}

// claimedGPUs waits until pod's claim is allocated and returns its devices
// as GPUs of the node (joined by UUID, as the scheduler joins them), and
// the allocation's results.
func claimedGPUs(t *testing.T, ns, pod string, slice *resourcev1.ResourceSlice, hw *topology.NodeTopology) (topology.GPUSet, []resourcev1.DeviceRequestAllocationResult) {
	t.Helper()
	results := waitClaimAllocated(t, ns, pod, time.Minute)
	var devices []topology.DRADevice
	for _, d := range slice.Spec.Devices {
		devices = append(devices, topology.DRADevice{Driver: slice.Spec.Driver, Name: d.Name, UUID: *d.Attributes[lockstep.DRAUUIDAttribute].StringValue})
	}
	join := topology.JoinDRADevices(hw, lockstep.DRAGPUDriver, devices)
	var set topology.GPUSet
	for _, r := range results {
		gpu, ok := join.GPUs[r.Device]
		if r.Driver != lockstep.DRAGPUDriver || r.Pool != slice.Spec.Pool.Name || !ok {
			t.Fatalf("pod %s's claim got %s/%s/%s, not a GPU of node %s", pod, r.Driver, r.Pool, r.Device, slice.Spec.Pool.Name)
		}
		set |= topology.NewGPUSet(gpu)
	}
	return set, results
}
