package topologyplacement

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// gb200Plugin is a test plugin on a partially occupied GB200 NVL72
// cluster of n compute trays (4 GPUs each; 25,000 is 100,000 GPUs), the
// model of placement's BenchmarkPlaceGB200 (18 trays per NVLink clique, a
// rack; 4 cliques per leaf, 16 leaves per spine and 8 spines per block),
// busier: a sixth of the racks idle, half full and the rest with 0 to 4
// busy GPUs per tray (a pod holding them), with a fixed seed, so a third
// of the GPUs are free but no spine has 2,048 in whole trays. Its gang
// ns/g has members 4-GPU members and wants them in one spine (Required).
func gb200Plugin(b *testing.B, n, members int) *metricsPlugin {
	b.Helper()
	const perClique, perLeaf, perSpine, perBlock = 18, 4, 16, 8
	prof, _ := topology.LookupProfile("gb200-nvl72")
	proto, err := prof.Node()
	if err != nil {
		b.Fatal(err)
	}
	p, clock := newTestPlugin(b)
	ownMetrics(b, p)
	rng := rand.New(rand.NewPCG(27, 0))
	nodes := make([]fwk.NodeInfo, n)
	var rack v1alpha1.NodeTopologySpec
	var busy int
	for i := range n {
		clique := i / perClique
		if i%perClique == 0 {
			r := *proto
			nv := *proto.NVLinkDomain
			nv.ClusterUUID, nv.CliqueID = "nvl72", uint32(clique)
			r.NVLinkDomain = &nv
			rack, busy = v1alpha1.SpecFromTopology(&r, prof.Name), rng.IntN(6)
		}
		used := 0
		switch busy {
		case 1, 2, 3:
			used = prof.GPUCount
		case 4, 5:
			used = rng.IntN(prof.GPUCount + 1)
		}
		name := fmt.Sprintf("gb200-%05d", i)
		nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rack}
		var pods []*v1.Pod
		if used > 0 {
			pod := utiltesting.MakePod("busy-"+name, "other").GPUs(int64(used)).Obj()
			pod.UID = types.UID("uid-busy-" + name)
			pod.Spec.NodeName = name
			pods = append(pods, pod)
			gpus := make([]int32, 0, used)
			for _, g := range rng.Perm(prof.GPUCount)[:used] {
				gpus = append(gpus, int32(g))
			}
			nt.Status.Allocations = []v1alpha1.GPUAllocation{{Namespace: "other", Pod: pod.Name, PodUID: string(pod.UID), GPUs: gpus}}
		}
		p.view.Set(nil, nt)
		leaf := clique / perLeaf
		spine := leaf / perSpine
		node := gpuNode(name, int64(prof.GPUCount))
		node.Status.Allocatable[v1.ResourceCPU] = *resource.NewQuantity(int64(prof.CPUs), resource.DecimalSI)
		node.Status.Allocatable[v1.ResourceMemory] = *resource.NewQuantity(int64(prof.MemoryGiB)<<30, resource.BinarySI)
		node.Labels = map[string]string{
			lockstep.LabelProfile:     prof.Name,
			lockstep.LabelGPUClique:   "nvl72." + fmt.Sprint(clique),
			lockstep.LabelFabricTier0: fmt.Sprintf("leaf-%04d", leaf),
			lockstep.LabelFabricTier1: fmt.Sprintf("spine-%03d", spine),
			lockstep.LabelFabricTier2: fmt.Sprintf("block-%02d", spine/perBlock),
		}
		nodes[i] = nodeInfo(node, pods...)
	}

	clientset := clientsetfake.NewClientset()
	pods := make([]*v1.Pod, members)
	for i := range pods {
		pod := utiltesting.MakePod(fmt.Sprintf("m-%d", i), "ns").GPUs(4).PodGroup("g").Obj()
		pod.UID = types.UID("uid-" + pod.Name)
		pods[i] = pod
	}
	p.handle = &fakeHandle{clientset: clientset, informers: podInformers(b, clientset, pods)}
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	pg := utiltesting.MakePodGroup("g", "ns", int32(members)).Obj()
	pg.Annotations = map[string]string{
		lockstep.AnnotationTopologyLevel: lockstep.LevelSpine,
		lockstep.AnnotationTopologyMode:  string(lockstep.Required),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pg).Build()
	p.reader, p.client = c, c
	return &metricsPlugin{TopologyPlacement: p, clock: clock, nodes: nodes, pods: pods}
}

// BenchmarkGangRetryNotFitting retries the members of a 2,048-GPU gang (512
// members of 4 GPUs, Required in one spine) that no spine of the GB200
// model has room for, at 25,000 trays: "plan" is a retry after an event
// retired the gang's verdict, which plans the gang from scratch (snapshot
// and placement) as every retry did before verdicts were remembered, and
// "remembered" a retry with nothing changed since the verdict. Each op is
// the next member's PreFilter.
func BenchmarkGangRetryNotFitting(b *testing.B) {
	const trays, members = 25_000, 512
	p := gb200Plugin(b, trays, members)
	ctx := context.Background()
	retry := func(b *testing.B, i int) {
		if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[i%members], p.nodes); status.Code() != fwk.UnschedulableAndUnresolvable {
			b.Fatalf("PreFilter: %v; want the gang turned away", status)
		}
	}
	for _, name := range []string{"plan", "remembered"} {
		b.Run(name, func(b *testing.B) {
			p.gangs.Verdicts = gangmanager.NewVerdicts()
			retry(b, 0)
			b.ReportAllocs()
			i := 1
			for b.Loop() {
				if name == "plan" {
					// Room was freed somewhere: the verdict is retired.
					p.gangs.Verdicts.MayFit()
				}
				retry(b, i)
				i++
			}
		})
	}
}
