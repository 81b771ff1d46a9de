package e2e

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestFakeAgentPublishesEveryNode checks the fake agent publishes one
// NodeTopology per model node, each describing the node's profile and owned
// by its Node, and logs how long publishing took.
func TestFakeAgentPublishesEveryNode(t *testing.T) {
	ctx := context.Background()
	agentProc, ok := cluster.Component("topology-agent")
	if !ok {
		t.Fatal("topology-agent is not running")
	}
	want := cluster.Model.Nodes()
	// Other tests may run first; the creation timestamps below tell when the
	// objects were published.
	var list v1alpha1.NodeTopologyList
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "a NodeTopology per node", func(ctx context.Context) (bool, error) {
		if err := cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		if len(list.Items) < len(want) {
			return false, nil
		}
		for _, nt := range list.Items {
			if nt.Status.HeartbeatTime.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v (have %d of %d)", err, len(list.Items), len(want))
	}
	var last time.Time
	byName := map[string]*v1alpha1.NodeTopology{}
	for i := range list.Items {
		nt := &list.Items[i]
		byName[nt.Name] = nt
		if nt.CreationTimestamp.After(last) {
			last = nt.CreationTimestamp.Time
		}
	}
	// Timestamps have one-second resolution. A test run before this one may
	// have restarted the agent, which then found the objects published.
	if elapsed := last.Sub(agentProc.Started.Truncate(time.Second)); elapsed >= 0 {
		t.Logf("%d NodeTopology objects published %s after the agent started", len(list.Items), elapsed)
	} else {
		t.Logf("%d NodeTopology objects, the last published %s before this agent (restarted by an earlier test) started", len(list.Items), -elapsed)
	}
	for _, n := range want {
		nt, ok := byName[n.Name]
		if !ok {
			t.Errorf("no NodeTopology for node %s", n.Name)
			continue
		}
		profile, _ := topology.LookupProfile(n.Labels[lockstep.LabelProfile])
		if int(nt.Spec.GPUCount) != profile.GPUCount || nt.Spec.GPUProduct != profile.GPUProduct || nt.Spec.Profile != profile.Name {
			t.Errorf("%s: spec %d x %s (%s), want %d x %s (%s)", n.Name, nt.Spec.GPUCount, nt.Spec.GPUProduct, nt.Spec.Profile,
				profile.GPUCount, profile.GPUProduct, profile.Name)
		}
		if _, err := nt.Spec.ToTopology(); err != nil {
			t.Errorf("%s: published spec does not convert: %v", n.Name, err)
		}
		if len(nt.OwnerReferences) != 1 || nt.OwnerReferences[0].Kind != "Node" || nt.OwnerReferences[0].Name != n.Name {
			t.Errorf("%s: owner references %+v, want its Node", n.Name, nt.OwnerReferences)
		}
		if nt.Status.HeartbeatTime.IsZero() || nt.Status.Agent != "fake" {
			t.Errorf("%s: status %+v lacks the fake agent's heartbeat", n.Name, nt.Status)
		}
	}
}

// TestAllocationFollowsPods checks the emulated device plugin: a bound pod
// gets the GPUs the scheduler wrote on it, a second pod on the node gets GPUs
// of its own, and deleting a pod frees its GPUs.
func TestAllocationFollowsPods(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	first := utiltesting.MakePod("first", ns).GPUs(4).SchedulerName(localcluster.SchedulerName).Obj()
	cluster.CreatePods(t, first)
	node := waitBound(t, ns, first.Name)

	second := utiltesting.MakePod("second", ns).GPUs(2).SchedulerName(localcluster.SchedulerName).Obj()
	second.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	cluster.CreatePods(t, second)
	waitBound(t, ns, second.Name)

	firstUID := podUID(t, ns, first.Name)
	secondUID := podUID(t, ns, second.Name)
	nt := waitNodeTopology(t, node, "both pods allocated", func(nt *v1alpha1.NodeTopology) bool {
		return len(nt.Status.Allocations) == 2
	})
	gpusOf := map[string][]int32{}
	for _, a := range nt.Status.Allocations {
		gpusOf[a.PodUID] = a.GPUs
	}
	for _, name := range []string{first.Name, second.Name} {
		pod, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		chosen, err := topology.ParseGPUList(pod.Annotations[lockstep.AnnotationGPUs])
		if err != nil {
			t.Fatalf("pod %s: the scheduler wrote no GPU choice: %v", name, err)
		}
		got := gpusOf[string(pod.UID)]
		if want := toInt32s(chosen.Indices()); !slices.Equal(got, want) {
			t.Errorf("pod %s holds GPUs %v, want the scheduler's choice %v", name, got, want)
		}
	}
	if slices.ContainsFunc(gpusOf[secondUID], func(g int32) bool { return slices.Contains(gpusOf[firstUID], g) }) {
		t.Errorf("pods share GPUs: %v and %v", gpusOf[firstUID], gpusOf[secondUID])
	}
	if nt.Status.FreeGPUs != 2 {
		t.Errorf("freeGPUs = %d, want 2", nt.Status.FreeGPUs)
	}

	if err := cluster.Clientset.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodeTopology(t, node, "first pod's GPUs freed", func(nt *v1alpha1.NodeTopology) bool {
		return len(nt.Status.Allocations) == 1 && nt.Status.Allocations[0].PodUID == secondUID && nt.Status.FreeGPUs == 6
	})
}

// TestDeletingNodeRemovesNodeTopology checks the owner reference: the garbage
// collector deletes a NodeTopology with its Node.
func TestDeletingNodeRemovesNodeTopology(t *testing.T) {
	ctx := context.Background()
	model := *cluster.Model
	model.Pools = []clustermodel.Pool{{Name: "ephemeral", Profile: "dgx1-v100", Nodes: 1, NodesPerDomain: map[string]int{}}}
	for _, l := range model.Levels {
		model.Pools[0].NodesPerDomain[l.Name] = 1
	}
	nodes := model.Nodes()
	if err := cluster.CreateNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	name := nodes[0].Name
	t.Cleanup(func() { _ = cluster.DeleteNodes(ctx, nodes) })
	waitNodeTopology(t, name, "published", func(nt *v1alpha1.NodeTopology) bool { return nt.Spec.Profile == "dgx1-v100" })

	if err := cluster.Clientset.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "NodeTopology "+name+" garbage-collected", func(ctx context.Context) (bool, error) {
		err := cluster.Client.Get(ctx, client.ObjectKey{Name: name}, &v1alpha1.NodeTopology{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitBound(t *testing.T, ns, pod string) string {
	t.Helper()
	var node string
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, time.Minute, "pod "+pod+" bound", func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func podUID(t *testing.T, ns, name string) string {
	t.Helper()
	p, err := cluster.Clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

func waitNodeTopology(t *testing.T, node, what string, cond func(*v1alpha1.NodeTopology) bool) *v1alpha1.NodeTopology {
	t.Helper()
	nt := &v1alpha1.NodeTopology{}
	err := localcluster.Poll(context.Background(), 200*time.Millisecond, 30*time.Second, "NodeTopology "+node+": "+what, func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: node}, nt); err != nil {
			return false, nil
		}
		return cond(nt), nil
	})
	if err != nil {
		t.Fatalf("%v; last status: %+v", err, nt.Status)
	}
	return nt
}

// TestRealAgentWithoutNVMLExitsWithReason runs the agent in real mode on this
// machine, which has no NVIDIA driver: it must exit non-zero and say how to
// fix it, not run without publishing anything.
func TestRealAgentWithoutNVMLExitsWithReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node := cluster.Model.Nodes()[0].Name
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.RepoRoot, "bin", "lockstep-topology-agent"),
		"--mode=real", "--node-name="+node, "--kubeconfig="+cluster.Kubeconfig,
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
		"--sysfs-root="+t.TempDir(), "--pod-resources-socket=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("agent ended with %v, want exit status 1; output:\n%s", err, out)
	}
	for _, want := range []string{"libnvidia-ml.so.1", "--mode=fake"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not mention %q:\n%s", want, out)
		}
	}
}

func toInt32s(in []int) []int32 {
	out := make([]int32, len(in))
	for i, v := range in {
		out[i] = int32(v)
	}
	return out
}
