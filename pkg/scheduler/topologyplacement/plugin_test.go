package topologyplacement

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/nodeview"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
	"github.com/lockstep-dev/lockstep/pkg/util/keyset"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// newTestPlugin is the plugin without a cluster: args, books, index and a
// fake clock.
func newTestPlugin(t testing.TB) (*TopologyPlacement, *clocktesting.FakeClock) {
	t.Helper()
	args, err := decodeArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m, err := registerMetrics(metrics.NewKubeRegistry().Register)
	if err != nil {
		t.Fatal(err)
	}
	clientset := clientsetfake.NewClientset()
	handle := &fakeHandle{clientset: clientset, informers: podInformers(t, clientset, nil)}
	p := &TopologyPlacement{args: args, clock: clock, handle: handle, metrics: m, profiles: keyset.New(), ignored: keyset.New(), binds: newBindBacklog(-1, clock), behind: &atomic.Bool{}}
	p.gangs = p.newGangManager()
	p.view = p.newNodeView(nil, nil)
	return p, clock
}

func TestPlanStillValid(t *testing.T) {
	p, _ := newTestPlugin(t)
	plan := &placement.Plan{Members: []placement.Assignment{
		{Node: "a", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
		{Node: "b", GPUs: topology.NewGPUSet(0, 1, 2, 3)},
	}}
	g := p.gangs.Books.Add("ns/g", plan, time.Unix(0, 0))
	busy := utiltesting.MakePod("other", "ns").GPUs(6).Obj()
	cordoned := gpuNode("b", 8)
	cordoned.Spec.Unschedulable = true
	tests := []struct {
		name  string
		nodes []fwk.NodeInfo
		want  bool
	}{
		{"both nodes have room", []fwk.NodeInfo{nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8))}, true},
		{"planned node deleted", []fwk.NodeInfo{nodeInfo(gpuNode("a", 8))}, false},
		{"planned node taken by another pod", []fwk.NodeInfo{nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8), busy)}, false},
		{"planned node cordoned", []fwk.NodeInfo{nodeInfo(gpuNode("a", 8)), nodeInfo(cordoned)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.planStillValid(g, tc.nodes); got != tc.want {
				t.Errorf("planStillValid = %v, want %v", got, tc.want)
			}
		})
	}
	// A reserved member's node no longer needs room: only open slots count.
	p.gangs.Books.ReserveSlot("ns/g", "member-b", "b", -1)
	if !p.planStillValid(g, []fwk.NodeInfo{nodeInfo(gpuNode("a", 8)), nodeInfo(gpuNode("b", 8), busy)}) {
		t.Error("plan invalid because of a node whose slot is already reserved")
	}
}

// gangOf is the Gang placement.Decide plans for pg's gang of
// pg.Spec.MinMember pending members: the plugin's request under its policy.
func gangOf(p *TopologyPlacement, pg *schedv1alpha1.PodGroup, pod *v1.Pod, s *cycleState) (placement.Gang, error) {
	req, err := p.request(pg, pod, s, gangmanager.Members{Total: int(pg.Spec.MinMember)})
	if err != nil {
		return placement.Gang{}, err
	}
	return p.policy().Gang(req)
}

func TestGangRequestWidensPreferredOverTime(t *testing.T) {
	p, clock := newTestPlugin(t)
	pg := utiltesting.MakePodGroup("g", "ns", 4).Obj()
	pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: "clique", lockstep.AnnotationTopologyMode: "Preferred"}
	s := &cycleState{gang: "ns/g", req: nodeview.Request{GPUs: 8}}
	for _, step := range []struct {
		after time.Duration
		want  int
	}{
		{0, 0},
		{29 * time.Second, 0},
		{time.Second, 1},
		{30 * time.Second, 2},
		{30 * time.Second, 3},
		{30 * time.Second, 4}, // past the widest level: the planner caps it
	} {
		clock.Step(step.after)
		gang, err := gangOf(p, pg, nil, s)
		if err != nil {
			t.Fatal(err)
		}
		if gang.Widen != step.want || gang.Level != "clique" || gang.Members != 4 || gang.GPUsPerMember != 8 {
			t.Errorf("after %s: gang %+v, want Widen %d", clock.Since(time.Unix(1000, 0)), gang, step.want)
		}
	}
	// A Required gang widens the same way, from the narrowest level that
	// could hold it; the planner caps it at its level.
	pg.Annotations[lockstep.AnnotationTopologyMode] = "Required"
	if gang, err := gangOf(p, pg, nil, s); err != nil || gang.Widen != 4 {
		t.Errorf("Required gang: %+v, %v; want Widen 4", gang, err)
	}
}

// newLeafPreferredGang returns a plugin with a PodGroup ns/g of four
// 8-GPU pods that prefers a leaf.
func newLeafPreferredGang(t *testing.T) *metricsPlugin {
	t.Helper()
	p := newMetricsPlugin(t, 4, false, nil)
	pg := utiltesting.MakePodGroup("g", "ns", 4).Obj()
	pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: "leaf", lockstep.AnnotationTopologyMode: "Preferred"}
	if err := p.client.Create(context.Background(), pg); err != nil {
		t.Fatal(err)
	}
	return p
}

// leafNode returns an HGX H100 node in leaf under spine s0, its
// NodeTopology known to p, running one 8-GPU pod when busy.
func leafNode(t *testing.T, p *metricsPlugin, name, leaf string, busy bool) fwk.NodeInfo {
	t.Helper()
	v1node := gpuNode(name, 8)
	v1node.Labels = map[string]string{lockstep.LabelFabricTier0: leaf, lockstep.LabelFabricTier1: "s0"}
	p.view.Set(nil, hgxNodeTopology(t, name))
	var pods []*v1.Pod
	if busy {
		pods = append(pods, utiltesting.MakePod("busy-"+name, "other").GPUs(8).Obj())
	}
	return nodeInfo(v1node, pods...)
}

// TestPreFilterPreferredGangSkipsLevelsTooSmall plans a leaf:Preferred gang
// of 4 x 8 GPUs on 8-GPU nodes at the fake clock's first instant and again
// one preferredWait later. The gang waits for a leaf only when some leaf
// could hold it once its busy GPUs free up.
func TestPreFilterPreferredGangSkipsLevelsTooSmall(t *testing.T) {
	type node struct {
		name, leaf string
		busy       bool
	}
	tests := []struct {
		name  string
		nodes []node
		// wantFirst and wantLater are the plan's nodes at the first
		// PreFilter and after one preferredWait; nil is Unschedulable.
		wantFirst, wantLater []string
	}{
		{
			// Leaves of 2 nodes hold 16 GPUs even when empty.
			name: "no leaf can ever hold the gang: spread at once",
			nodes: []node{
				{"n0", "l0", false}, {"n1", "l0", false},
				{"n2", "l1", false}, {"n3", "l1", false},
			},
			wantFirst: []string{"n0", "n1", "n2", "n3"},
			wantLater: []string{"n0", "n1", "n2", "n3"},
		},
		{
			// Each leaf of 4 nodes could hold 32 GPUs but has one busy node.
			name: "a leaf could hold the gang: drain it, then spread",
			nodes: []node{
				{"n0", "l0", true}, {"n1", "l0", false}, {"n2", "l0", false}, {"n3", "l0", false},
				{"n4", "l1", true}, {"n5", "l1", false}, {"n6", "l1", false}, {"n7", "l1", false},
			},
			wantLater: []string{"n1", "n2", "n3", "n5"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newLeafPreferredGang(t)
			var nodes []fwk.NodeInfo
			for _, n := range tc.nodes {
				nodes = append(nodes, leafNode(t, p, n.name, n.leaf, n.busy))
			}
			for i, want := range [][]string{tc.wantFirst, tc.wantLater} {
				if i == 1 {
					// The gang drains a leaf that frees no GPU: it
					// widens once the drain stalls.
					p.clock.Step(p.gangs.DrainStall())
				}
				result, status := p.PreFilter(context.Background(), framework.NewCycleState(), p.pods[0], nodes)
				switch {
				case want == nil && status.Code() != fwk.UnschedulableAndUnresolvable:
					t.Errorf("PreFilter %d = %v, %v; want unschedulable", i, result, status)
				case want == nil:
					if !strings.Contains(status.Message(), "Preferred constraint on leaf; it would fit in one spine") {
						t.Errorf("PreFilter %d: message %q does not say the gang waits for a leaf", i, status.Message())
					}
				case !status.IsSuccess():
					t.Errorf("PreFilter %d: %v; want a plan on %v", i, status, want)
				default:
					if diff := cmp.Diff(want, sets.List(result.NodeNames)); diff != "" {
						t.Errorf("PreFilter %d nodes (-want,+got):\n%s", i, diff)
					}
				}
			}
		})
	}
}

func TestGangRequestRejectsBadAnnotations(t *testing.T) {
	p, _ := newTestPlugin(t)
	s := &cycleState{gang: "ns/g"}
	for name, annotations := range map[string]map[string]string{
		"unknown level": {lockstep.AnnotationTopologyLevel: "rack"},
		"unknown mode":  {lockstep.AnnotationTopologyLevel: "leaf", lockstep.AnnotationTopologyMode: "Sometimes"},
	} {
		pg := utiltesting.MakePodGroup("g", "ns", 2).Obj()
		pg.Annotations = annotations
		if _, err := gangOf(p, pg, nil, s); err == nil {
			t.Errorf("%s: accepted %v", name, annotations)
		}
	}
	pg := utiltesting.MakePodGroup("g", "ns", 2).Obj()
	pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: "leaf"}
	gang, err := gangOf(p, pg, nil, s)
	if err != nil || gang.Mode != lockstep.Preferred {
		t.Errorf("level without mode: %+v, %v; want the default mode Preferred", gang, err)
	}
}

// TestGangRequestKueueAnnotations: a foreign gang's PodGroup has no
// lockstep.dev/topology-* annotations; Kueue TAS's annotations on its pods
// stand in for them, and Lockstep's own win when both are given.
func TestGangRequestKueueAnnotations(t *testing.T) {
	p, _ := newTestPlugin(t)
	s := &cycleState{gang: "ns/g"}
	type got struct {
		Level    string
		Mode     lockstep.ConstraintMode
		Implicit bool
		Err      bool
	}
	for _, tc := range []struct {
		name          string
		pg            map[string]string
		pod           map[string]string
		unconstrained UnconstrainedPlacement
		want          got
	}{
		{name: "required leaf from the pod", pod: map[string]string{lockstep.AnnotationKueueRequiredTopology: lockstep.LabelFabricTier0},
			want: got{Level: "leaf", Mode: lockstep.Required}},
		{name: "preferred spine from the pod", pod: map[string]string{lockstep.AnnotationKueuePreferredTopology: lockstep.LabelFabricTier1},
			want: got{Level: "spine", Mode: lockstep.Preferred}},
		{name: "lockstep's annotations win",
			pg:   map[string]string{lockstep.AnnotationTopologyLevel: "spine", lockstep.AnnotationTopologyMode: "Required"},
			pod:  map[string]string{lockstep.AnnotationKueueRequiredTopology: lockstep.LabelFabricTier0},
			want: got{Level: "spine", Mode: lockstep.Required}},
		{name: "unknown label key", pod: map[string]string{lockstep.AnnotationKueueRequiredTopology: "example.com/rack"},
			want: got{Err: true}},
		{name: "none: the tightest domain first", want: got{Level: lockstep.LevelHost, Mode: lockstep.Preferred, Implicit: true}},
		{name: "none, placed anywhere", unconstrained: Anywhere, want: got{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.args.Unconstrained = TightestFirst
			if tc.unconstrained != "" {
				p.args.Unconstrained = tc.unconstrained
			}
			pg := utiltesting.MakePodGroup("g", "ns", 2).Obj()
			pg.Annotations = tc.pg
			pod := utiltesting.MakePod("p", "ns").Obj()
			pod.Annotations = tc.pod
			gang, err := gangOf(p, pg, pod, s)
			res := got{Level: gang.Level, Mode: gang.Mode, Implicit: gang.Implicit, Err: err != nil}
			if res.Err {
				res.Level, res.Mode = "", ""
			}
			if diff := cmp.Diff(tc.want, res); diff != "" {
				t.Errorf("gangRequest (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestScorePrefersNodesWithNVLinkSets(t *testing.T) {
	p, _ := newTestPlugin(t)
	nvlink := hgxNodeTopology(t, "nvlink")
	p.view.Set(nil, nvlink)
	pcie := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: "pcie"}}
	prof, _ := topology.LookupProfile("l40s-pcie")
	hw, _ := prof.Node()
	pcie.Spec = v1alpha1.SpecFromTopology(hw, prof.Name)
	p.view.Set(nil, pcie)

	state := framework.NewCycleState()
	state.Write(stateKey, &cycleState{req: nodeview.Request{GPUs: 2}})
	pod := utiltesting.MakePod("p", "ns").GPUs(2).Obj()
	score := func(node string) int64 {
		s, status := p.Score(context.Background(), state, pod, nodeInfo(gpuNode(node, 8)))
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		return s
	}
	if a, b := score("nvlink"), score("pcie"); a <= b {
		t.Errorf("score nvlink %d <= pcie %d", a, b)
	}
	if got := score("unknown"); got != 0 {
		t.Errorf("node without NodeTopology scored %d, want 0", got)
	}
}

// BenchmarkScore measures Score for a GPU pod outside gangs: it must be a
// table lookup with no allocation, since it runs per node per pod.
func BenchmarkScore(b *testing.B) {
	p, _ := newTestPlugin(b)
	p.view.Set(nil, hgxNodeTopology(b, "n"))
	state := framework.NewCycleState()
	state.Write(stateKey, &cycleState{req: nodeview.Request{GPUs: 4}})
	pod := utiltesting.MakePod("p", "ns").GPUs(4).Obj()
	ni := nodeInfo(gpuNode("n", 8))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, status := p.Score(ctx, state, pod, ni); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
}

// BenchmarkPlanGang measures what PreFilter spends planning a new gang of
// 8-GPU members on 5,000 HGX H100 nodes (32 per leaf, 16 leaves per spine,
// labelled with their GPU product as GPU feature discovery does): the
// snapshot with the cached tree and Rater, the plan and its rating. The
// tree and Rater are built before the timer, as the scheduler reuses them
// while node labels stay the same. idle has every GPU free; loaded has a
// uniformly random number of each node's GPUs (0 to 8, random ones, fixed
// seed) held by a running pod that the node's NodeTopology reports. The
// acceptance case of issue 15 is nodes=5000/gpus=512: < 2 ms and < 500
// allocations per plan.
func BenchmarkPlanGang(b *testing.B) {
	const nodes = 5000
	for _, gpus := range []int{64, 512} {
		for _, load := range []string{"idle", "loaded"} {
			b.Run(fmt.Sprintf("nodes=%d/gpus=%d/%s", nodes, gpus, load), func(b *testing.B) {
				p, infos := planGangCluster(b, nodes, load == "loaded")
				pod := utiltesting.MakePod("p", "ns").GPUs(8).PodGroup("g").Obj()
				gang := placement.Gang{Members: gpus / 8, GPUsPerMember: 8, MilliCPUPerMember: 1000, MemoryPerMember: 1 << 30}
				// PreFilter reads the member's request once, before it plans.
				req := p.view.Request(pod)
				plan := func() *placement.Plan {
					snap, err := p.view.Snapshot(pod, "ns/g", req, infos)
					if err != nil {
						b.Fatal(err)
					}
					plan, err := placement.Place(snap, gang, placement.Options{})
					if err != nil {
						b.Fatal(err)
					}
					placement.RankOrder(snap.Tree, plan, snap.NodeTopology)
					// As the plugin does once a plan is decided.
					p.view.Recycle(snap)
					return plan
				}
				first := plan() // builds the cached tree and Rater
				if first.Efficiency == 0 {
					b.Fatalf("plan not rated: %s", first.Explanation)
				}
				b.ReportAllocs()
				for b.Loop() {
					plan()
				}
				b.ReportMetric(first.Efficiency, "efficiency")
			})
		}
	}
}

// planGangCluster is the plugin and the NodeInfos of BenchmarkPlanGang
// (schedtesting.HGXCluster).
func planGangCluster(b *testing.B, n int, loaded bool) (*TopologyPlacement, []fwk.NodeInfo) {
	b.Helper()
	p, _ := newTestPlugin(b)
	nts, infos := schedtesting.HGXCluster(b, n, loaded)
	for _, nt := range nts {
		p.view.Set(nil, nt)
	}
	return p, infos
}

func TestPlanKeySeparatesSizeClasses(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"worker", utiltesting.MakePod("w", "ns").GPUs(8).PodGroup("job").Obj(), "ns/job#8"},
		{"chief with fewer GPUs", utiltesting.MakePod("c", "ns").GPUs(2).PodGroup("job").Obj(), "ns/job#2"},
		{"parameter server without GPUs", utiltesting.MakePod("ps", "ns").PodGroup("job").Obj(), ""},
		{"GPU pod outside gangs", utiltesting.MakePod("solo", "ns").GPUs(8).Obj(), ""},
	}
	for _, tc := range tests {
		p, _ := newTestPlugin(t)
		if got := p.planKey(tc.pod); got != tc.want {
			t.Errorf("%s: planKey = %q, want %q", tc.name, got, tc.want)
		}
	}
	if ns, pg, ok := gangmanager.SplitPlanKey("ns/job#8"); !ok || ns != "ns" || pg != "job" {
		t.Errorf("SplitPlanKey = %q, %q, %v", ns, pg, ok)
	}
}

func TestForgetDeletedGangs(t *testing.T) {
	p, _ := newTestPlugin(t)
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p.reader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(utiltesting.MakePodGroup("keep", "ns", 2).Obj()).Build()
	now := time.Unix(0, 0)
	p.gangs.FirstSeen("ns/keep#8", now)
	p.gangs.FirstSeen("ns/gone#8", now)
	p.forgetDeletedGangs(context.Background())
	if diff := cmp.Diff([]string{"ns/keep#8"}, p.gangs.Attempted()); diff != "" {
		t.Errorf("remembered gangs (-want,+got):\n%s", diff)
	}
}

// TestWideningClock: a gang widens one level per PreferredWait since it was
// first attempted, and the plugin retries it when the next level opens,
// which no cluster event announces.
func TestWideningClock(t *testing.T) {
	p, clock := newTestPlugin(t)
	p.args.PreferredWait.Duration = 30 * time.Second
	type state struct {
		Widen int
		Next  time.Duration
	}
	var got []state
	for _, step := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 15 * time.Second, 60 * time.Second} {
		clock.Step(step)
		got = append(got, state{p.policy().Widen(p.wait("ns/g")), p.nextWiden("ns/g")})
	}
	want := []state{{0, 30 * time.Second}, {0, 20 * time.Second}, {1, 30 * time.Second}, {1, 15 * time.Second}, {3, 15 * time.Second}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("widen and time to the next widening at 0, 10, 30, 45, 105 s (-want,+got):\n%s", diff)
	}
	p.args.PreferredWait.Duration = 0
	if w, next := p.policy().Widen(p.wait("ns/g")), p.nextWiden("ns/g"); w != 0 || next != 0 {
		t.Errorf("without a wait: widen %d, next %v; want 0 and no retry", w, next)
	}
}

// TestWaitingGangDrainsALeaf: a leaf:Preferred gang that fits no leaf now
// drains the leaf nearest to holding it. A GPU pod outside gangs is kept off
// that leaf and says why; the other leaf stays open. While the leaf keeps
// gaining room the gang does not widen; once it stalls for a preferredWait
// the gang widens, is planned and releases the leaf.
func TestWaitingGangDrainsALeaf(t *testing.T) {
	p := newLeafPreferredGang(t)
	// Both leaves have room for two members; l0 is drained, the first.
	nodes := make([]fwk.NodeInfo, 8)
	setNode := func(i int, busy bool) {
		nodes[i] = leafNode(t, p, fmt.Sprintf("n%d", i), fmt.Sprintf("l%d", i/4), busy)
	}
	for i := range nodes {
		setNode(i, i == 0 || i == 1 || i == 4 || i == 5)
	}
	ctx := context.Background()
	key := p.planKey(p.pods[0])
	stillDraining := func(when string) {
		t.Helper()
		_, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], nodes)
		if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "draining leaf spine=s0/leaf=l0 for it") {
			t.Fatalf("PreFilter %s: %v; want unschedulable, draining l0", when, status)
		}
	}
	stillDraining("at first")
	drainedGauge := func() float64 {
		p.sweep(ctx)
		return observed(t, p.reg, "lockstep_scheduler_drained_nodes")["lockstep_scheduler_drained_nodes{}"]
	}
	if got := drainedGauge(); got != 4 {
		t.Errorf("drained_nodes = %v, want l0's 4", got)
	}

	single := utiltesting.MakePod("single", "other").GPUs(1).Obj()
	state := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, state, single, nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter of a pod outside gangs: %v", status)
	}
	drained := "node is drained for PodGroup " + key + ", which waits for its tightest domain"
	for i, want := range map[int]string{2: drained, 3: drained, 6: "", 7: ""} {
		if got := p.Filter(ctx, state, single, nodes[i]).Message(); got != want {
			t.Errorf("Filter of a pod outside gangs on n%d: %q, want %q", i, got, want)
		}
	}

	// A pod that outranks the gang may take l0's GPUs: it could preempt
	// the gang's pods once they ran.
	urgent := utiltesting.MakePod("urgent", "other").GPUs(1).Obj()
	urgent.Spec.Priority = ptr.To[int32](1000)
	urgentState := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, urgentState, urgent, nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter of an urgent pod outside gangs: %v", status)
	}
	if got := p.Filter(ctx, urgentState, urgent, nodes[2]).Message(); got != "" {
		t.Errorf("Filter of a pod outranking the gang on drained n2: %q, want it to fit", got)
	}

	// n1's job ends 20 s in: l0 frees GPUs, so the gang is held there a
	// drainStall from then, long past its own first wait.
	stall := p.gangs.DrainStall()
	p.clock.Step(20 * time.Second)
	setNode(1, false)
	stillDraining("as l0 frees GPUs")
	p.clock.Step(stall - time.Second)
	stillDraining("within a drainStall of l0's progress")
	if got := p.nextWiden(key); got != time.Second {
		t.Errorf("next retry in %v, want 1s, when the hold ends", got)
	}

	// l0 stalls: the gang widens, is planned and releases l0.
	p.clock.Step(time.Second)
	result, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], nodes)
	if !status.IsSuccess() {
		t.Fatalf("PreFilter once l0 stalled: %v; want a plan over the spine", status)
	}
	if diff := cmp.Diff([]string{"n1", "n2", "n3", "n6"}, sets.List(result.NodeNames)); diff != "" {
		t.Errorf("plan once l0 stalled (-want,+got):\n%s", diff)
	}
	for _, n := range []string{"n1", "n6", "n7"} {
		if by := p.gangs.Books.DrainedFor(n); by != "" {
			t.Errorf("%s still drained for %s after the gang was planned", n, by)
		}
	}
	if got := drainedGauge(); got != 0 {
		t.Errorf("drained_nodes = %v after the gang was planned, want 0", got)
	}
}

// TestStalledDrainRestsADrainStall checks that a gang whose drained leaf
// freed no GPU for a drainStall releases it, drains nothing for the next
// drainStall (the leaf waits on pods that are not ending, so it stays open
// to others), then drains again: it still fits nowhere, even widened.
func TestStalledDrainRestsADrainStall(t *testing.T) {
	p := newLeafPreferredGang(t)
	// Three of each leaf's four nodes are busy: the gang of four fits
	// neither a leaf nor the spine.
	var nodes []fwk.NodeInfo
	for i := range 8 {
		nodes = append(nodes, leafNode(t, p, fmt.Sprintf("n%d", i), fmt.Sprintf("l%d", i/4), i%4 != 3))
	}
	ctx := context.Background()
	key := p.planKey(p.pods[0])
	attempt := func(when string, wantDrain bool) {
		t.Helper()
		_, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], nodes)
		if status.Code() != fwk.UnschedulableAndUnresolvable {
			t.Fatalf("PreFilter %s: %v; want unschedulable", when, status)
		}
		if got := strings.Contains(status.Message(), "draining leaf spine=s0/leaf=l0 for it"); got != wantDrain {
			t.Errorf("PreFilter %s: draining l0 = %v, want %v: %s", when, got, wantDrain, status.Message())
		}
		if _, drained := p.gangs.Books.Core().Drained(key); drained != wantDrain {
			t.Errorf("%s: the books hold a drain = %v, want %v", when, drained, wantDrain)
		}
	}
	attempt("at first", true)
	p.clock.Step(p.gangs.DrainStall())
	attempt("once l0 stalled", false)
	p.clock.Step(p.gangs.DrainStall() - time.Second)
	attempt("within a drainStall of the stall", false)
	p.clock.Step(time.Second)
	attempt("a drainStall after the stall", true)
}

// A drain made for a gang whose pending pods are all gone (a cycle that
// ran while they were being deleted, after the deletion's own release) is
// ended by the next sweep, not left to stall a drainStall later with its
// domain closed to equal-priority gangs.
func TestSweepEndsADrainHeldForNobody(t *testing.T) {
	p := newLeafPreferredGang(t)
	nodes := make([]fwk.NodeInfo, 8)
	for i := range nodes {
		nodes[i] = leafNode(t, p, fmt.Sprintf("n%d", i), fmt.Sprintf("l%d", i/4), i == 0 || i == 1 || i == 4 || i == 5)
	}
	ctx := context.Background()
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], nodes); !strings.Contains(status.Message(), "draining leaf") {
		t.Fatalf("PreFilter: %v; want the gang draining a leaf", status)
	}
	p.sweep(ctx)
	if p.gangs.Books.DrainedFor("n2") == "" {
		t.Fatal("the sweep released the drain of a gang whose pods still wait")
	}
	indexer := p.handle.SharedInformerFactory().Core().V1().Pods().Informer().GetIndexer()
	for _, pod := range p.pods {
		if err := indexer.Delete(pod); err != nil {
			t.Fatal(err)
		}
	}
	p.sweep(ctx)
	if by := p.gangs.Books.DrainedFor("n2"); by != "" {
		t.Errorf("n2 still drained for %s, whose pods are all gone", by)
	}
}
