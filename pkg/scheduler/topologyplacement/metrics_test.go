package topologyplacement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// fakeHandle is the part of framework.Handle the plugin uses: informers,
// a clientset, and no pods waiting at Permit.
type fakeHandle struct {
	framework.Handle
	clientset *clientsetfake.Clientset
	informers informers.SharedInformerFactory
	// apiCacher stands for SchedulerAsyncAPICalls; nil when it is off.
	apiCacher framework.APICacher
	// recorder gets the plugin's events; nil drops them.
	recorder events.EventRecorder
	// snapshot is the scheduler's snapshot; nil by default (see
	// SnapshotSharedLister).
	snapshot framework.SharedLister
}

func (h *fakeHandle) EventRecorder() events.EventRecorder {
	if h.recorder == nil {
		return &events.FakeRecorder{}
	}
	return h.recorder
}

func (h *fakeHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.informers }
func (h *fakeHandle) ClientSet() kubernetes.Interface                        { return h.clientset }
func (h *fakeHandle) IterateOverWaitingPods(func(framework.WaitingPod))      {}
func (h *fakeHandle) Activate(klog.Logger, map[string]*v1.Pod)               {}
func (h *fakeHandle) APICacher() framework.APICacher                         { return h.apiCacher }

// SnapshotSharedLister is nil unless a test sets snapshot: the tests hand
// PreFilter its nodes, which the plugin then indexes itself (nodeLookup);
// the real scheduler's snapshot is exercised by internal/perf's TestSmoke.
func (h *fakeHandle) SnapshotSharedLister() framework.SharedLister {
	if h.snapshot == nil {
		return nil
	}
	return h.snapshot
}

// metricsPlugin is a test plugin on two empty HGX nodes, a and b, whose
// metrics go to a registry of its own. Its PodGroup "ns/g" wants members
// members of 8 GPUs; pods are the gang's pods, known to the informers, the
// clientset and the controller-runtime client.
type metricsPlugin struct {
	*TopologyPlacement
	clock interface{ Step(time.Duration) }
	reg   metrics.KubeRegistry
	nodes []fwk.NodeInfo
	pods  []*v1.Pod
}

// ownMetrics gives p metrics in a registry of their own, which it returns,
// and a new node view that reports to them.
func ownMetrics(t testing.TB, p *TopologyPlacement) metrics.KubeRegistry {
	t.Helper()
	reg := metrics.NewKubeRegistry()
	m, err := registerMetrics(reg.Register)
	if err != nil {
		t.Fatal(err)
	}
	p.metrics = m
	p.view = p.newNodeView(nil, nil)
	return reg
}

// podInformers returns the clientset's informer factory as New leaves it
// (the PodGroup index on the pod informer), its pod store holding pods.
func podInformers(t testing.TB, clientset *clientsetfake.Clientset, pods []*v1.Pod) informers.SharedInformerFactory {
	t.Helper()
	factory := informers.NewSharedInformerFactory(clientset, 0)
	informer := factory.Core().V1().Pods().Informer()
	if err := podgroupindex.Register(informer); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods {
		if err := informer.GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return factory
}

func newMetricsPlugin(t testing.TB, members int, podGroup bool, getErr error) *metricsPlugin {
	t.Helper()
	p, clock := newTestPlugin(t)
	reg := ownMetrics(t, p)
	var pods []*v1.Pod
	var objs []runtime.Object
	for i := range members {
		pod := utiltesting.MakePod(fmt.Sprintf("m-%d", i), "ns").GPUs(8).PodGroup("g").Obj()
		pod.UID = types.UID("uid-" + pod.Name)
		pods = append(pods, pod)
		objs = append(objs, pod)
	}
	clientset := clientsetfake.NewClientset(objs...)
	p.handle = &fakeHandle{clientset: clientset, informers: podInformers(t, clientset, pods)}

	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	builder := fake.NewClientBuilder().WithScheme(scheme)
	if podGroup {
		builder = builder.WithObjects(utiltesting.MakePodGroup("g", "ns", int32(members)).Obj())
	}
	if getErr != nil {
		builder = builder.WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return getErr
			},
		})
	}
	c := builder.Build()
	p.reader, p.client = c, c

	var nodes []fwk.NodeInfo
	for _, name := range []string{"a", "b"} {
		p.view.Set(nil, hgxNodeTopology(t, name))
		nodes = append(nodes, nodeInfo(gpuNode(name, 8)))
	}
	return &metricsPlugin{TopologyPlacement: p, clock: clock, reg: reg, nodes: nodes, pods: pods}
}

// observed flattens the registry's families of the given names, or all,
// into "name{label=value,...}" → value, with histograms as their sample
// count (name_count) and sum (name_sum).
func observed(t *testing.T, reg metrics.Gatherer, names ...string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if len(names) > 0 && !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			series := "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetHistogram() != nil:
				out[f.GetName()+"_count"+series] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+series] = m.GetHistogram().GetSampleSum()
			case m.GetCounter() != nil:
				out[f.GetName()+series] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()+series] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestPlanDurationByOutcome(t *testing.T) {
	tests := []struct {
		name     string
		members  int
		podGroup bool
		getErr   error
		level    string
		want     string
	}{
		{name: "fits", members: 2, podGroup: true, want: outcomePlanned},
		{name: "too big for the nodes", members: 3, podGroup: true, want: outcomeUnschedulable},
		{name: "no PodGroup", members: 2, want: outcomeUnschedulable},
		{name: "unknown level", members: 2, podGroup: true, level: "rack", want: outcomeUnschedulable},
		{name: "PodGroup unreadable", members: 2, podGroup: true, getErr: errors.New("boom"), want: outcomeError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newMetricsPlugin(t, tc.members, tc.podGroup, tc.getErr)
			if tc.level != "" {
				pg := &schedv1alpha1.PodGroup{}
				if err := p.client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "g"}, pg); err != nil {
					t.Fatal(err)
				}
				pg.Annotations = map[string]string{lockstep.AnnotationTopologyLevel: tc.level}
				if err := p.client.Update(context.Background(), pg); err != nil {
					t.Fatal(err)
				}
			}
			_, status := p.PreFilter(context.Background(), framework.NewCycleState(), p.pods[0], p.nodes)
			if got := status.IsSuccess(); got != (tc.want == outcomePlanned) {
				t.Fatalf("PreFilter status %v", status)
			}
			want := map[string]float64{
				"lockstep_scheduler_plan_duration_seconds_count{outcome=" + tc.want + "}": 1,
				"lockstep_scheduler_plan_duration_seconds_sum{outcome=" + tc.want + "}":   0,
			}
			if diff := cmp.Diff(want, observed(t, p.reg, "lockstep_scheduler_plan_duration_seconds")); diff != "" {
				t.Errorf("metrics (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestGangMetricsFollowTheGang walks a gang of two from its first attempt to
// binding, and checks what each step records: planning time, held plans and
// GPUs, then the gang's wait and its placement's efficiency once.
func TestGangMetricsFollowTheGang(t *testing.T) {
	ctx := context.Background()
	p := newMetricsPlugin(t, 2, true, nil)
	states := make([]fwk.CycleState, len(p.pods))
	for i, pod := range p.pods {
		states[i] = framework.NewCycleState()
		if _, status := p.PreFilter(ctx, states[i], pod, p.nodes); !status.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", pod.Name, status)
		}
	}
	// Everything but invalidations, which this gang has none of.
	series := []string{"lockstep_scheduler_plan_duration_seconds", "lockstep_scheduler_plans_held", "lockstep_scheduler_held_gpus",
		"lockstep_scheduler_gang_wait_seconds", "lockstep_scheduler_placement_efficiency"}
	p.sweep(ctx)
	held := observed(t, p.reg, series...)
	if diff := cmp.Diff(map[string]float64{
		"lockstep_scheduler_plan_duration_seconds_count{outcome=planned}": 1,
		"lockstep_scheduler_plan_duration_seconds_sum{outcome=planned}":   0,
		"lockstep_scheduler_plans_held{}":                                 1,
		"lockstep_scheduler_held_gpus{}":                                  16,
		"lockstep_scheduler_gang_wait_seconds_count{}":                    0,
		"lockstep_scheduler_gang_wait_seconds_sum{}":                      0,
	}, held); diff != "" {
		t.Errorf("after planning (-want,+got):\n%s", diff)
	}

	p.clock.Step(42 * time.Second)
	for i, node := range []string{"a", "b"} {
		if status := p.Reserve(ctx, states[i], p.pods[i], node); !status.IsSuccess() {
			t.Fatalf("Reserve %s: %v", p.pods[i].Name, status)
		}
	}
	for i, node := range []string{"a", "b"} {
		if status := p.PreBind(ctx, states[i], p.pods[i], node); !status.IsSuccess() {
			t.Fatalf("PreBind %s: %v", p.pods[i].Name, status)
		}
	}
	p.sweep(ctx)
	g, _ := p.gangs.Books.Get("ns/g#8")
	level := g.Plan().LevelName
	if diff := cmp.Diff(map[string]float64{
		"lockstep_scheduler_plan_duration_seconds_count{outcome=planned}":    1,
		"lockstep_scheduler_plan_duration_seconds_sum{outcome=planned}":      0,
		"lockstep_scheduler_plans_held{}":                                    0,
		"lockstep_scheduler_held_gpus{}":                                     0,
		"lockstep_scheduler_gang_wait_seconds_count{}":                       1,
		"lockstep_scheduler_gang_wait_seconds_sum{}":                         42,
		"lockstep_scheduler_placement_efficiency_count{level=" + level + "}": 1,
		"lockstep_scheduler_placement_efficiency_sum{level=" + level + "}":   g.Plan().Efficiency,
	}, observed(t, p.reg, series...)); diff != "" {
		t.Errorf("after binding (-want,+got):\n%s", diff)
	}
	if g.Plan().Efficiency <= 0 || g.Plan().Efficiency > 1 {
		t.Errorf("efficiency %v outside (0,1]", g.Plan().Efficiency)
	}
}

func TestPlansInvalidatedByReason(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// drop makes the plan of a gang whose first member was planned and
		// reserved on node a go away.
		drop func(p *metricsPlugin, state fwk.CycleState)
		want dropReason
	}{
		{
			name: "plan outlives planTTL",
			drop: func(p *metricsPlugin, _ fwk.CycleState) {
				p.clock.Step(p.args.PlanTTL.Duration + time.Second)
				p.sweep(ctx)
			},
			want: dropExpired,
		},
		{
			name: "member unreserved",
			drop: func(p *metricsPlugin, state fwk.CycleState) {
				p.Unreserve(ctx, state, p.pods[0], "a")
			},
			want: dropUnreserved,
		},
		{
			name: "open slot's node deleted",
			drop: func(p *metricsPlugin, _ fwk.CycleState) {
				if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[1], p.nodes[:1]); status.IsSuccess() {
					t.Error("PreFilter placed a gang of two 8-GPU members on one node")
				}
			},
			want: dropNodeUnavailable,
		},
		{
			// A suspended or evicted job's PodGroup goes before its pods
			// are all reserved: its open slot frees its GPUs at once.
			name: "PodGroup deleted",
			drop: func(p *metricsPlugin, _ fwk.CycleState) {
				p.podGroupEvents(ctx).OnDelete(utiltesting.MakePodGroup("g", "ns", 2).Obj())
				if held := p.gangs.Books.HeldOn("b", ""); held != 0 {
					t.Errorf("books hold %s on b, the deleted gang's open slot", held)
				}
			},
			want: dropGangDeleted,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newMetricsPlugin(t, 2, true, nil)
			state := framework.NewCycleState()
			if _, status := p.PreFilter(ctx, state, p.pods[0], p.nodes); !status.IsSuccess() {
				t.Fatal(status)
			}
			if status := p.Reserve(ctx, state, p.pods[0], "a"); !status.IsSuccess() {
				t.Fatal(status)
			}
			tc.drop(p, state)
			// Dropping a plan that is already gone counts nothing.
			p.invalidate("ns/g#8", tc.want)
			got := observed(t, p.reg, "lockstep_scheduler_plans_invalidated_total")
			want := map[string]float64{}
			for _, r := range dropReasons {
				want["lockstep_scheduler_plans_invalidated_total{reason="+string(r)+"}"] = 0
			}
			want["lockstep_scheduler_plans_invalidated_total{reason="+string(tc.want)+"}"] = 1
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("invalidations (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRegisterMetricsTwice is kube-scheduler building the plugin for two
// profiles: the second instance shares the first one's series.
func TestRegisterMetricsTwice(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	first, err := registerMetrics(reg.Register)
	if err != nil {
		t.Fatal(err)
	}
	second, err := registerMetrics(reg.Register)
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	first.plansInvalidated.WithLabelValues(string(dropExpired)).Inc()
	second.plansInvalidated.WithLabelValues(string(dropExpired)).Inc()
	v, err := testutil.GetCounterMetricValue(second.plansInvalidated.WithLabelValues(string(dropExpired)))
	if err != nil || v != 2 {
		t.Errorf("shared counter = %v (%v), want 2", v, err)
	}
}
