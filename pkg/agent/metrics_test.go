package agent

import (
	"context"
	"errors"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// nonZero flattens the registry's non-zero series into
// "name{label=value,...}" → value.
func nonZero(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if v == 0 {
				continue
			}
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func agentScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

func TestPublisherMetricsAndReadiness(t *testing.T) {
	m, reg := newTestMetrics(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", UID: "node-uid"}}
	failStatus := false
	c := fake.NewClientBuilder().WithScheme(agentScheme(t)).WithObjects(node).
		WithStatusSubresource(&v1alpha1.NodeTopology{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if failStatus {
					return errors.New("apiserver away")
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	clock := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	pub := &Publisher{Client: c, Clock: clock, HeartbeatInterval: time.Minute, Mode: "fake", Metrics: m}
	probe := httptest.NewRequest("GET", "/readyz", nil)
	if pub.Ready(probe) == nil {
		t.Error("ready before the first publish")
	}
	spec := v1alpha1.NodeTopologySpec{GPUCount: 8}
	steps := []struct {
		name    string
		advance time.Duration
		status  v1alpha1.NodeTopologyStatus
		fail    bool
		want    map[string]float64
	}{
		{"first publish writes", 0, v1alpha1.NodeTopologyStatus{FreeGPUs: 8}, false, map[string]float64{
			"lockstep_agent_publishes_total{result=written}":            1,
			"lockstep_agent_last_publish_timestamp_seconds{node=gpu-0}": 1_700_000_000,
		}},
		{"nothing changed", 10 * time.Second, v1alpha1.NodeTopologyStatus{FreeGPUs: 8}, false, map[string]float64{
			"lockstep_agent_publishes_total{result=written}":            1,
			"lockstep_agent_publishes_total{result=unchanged}":          1,
			"lockstep_agent_last_publish_timestamp_seconds{node=gpu-0}": 1_700_000_010,
		}},
		{"status write fails", 10 * time.Second, v1alpha1.NodeTopologyStatus{FreeGPUs: 4}, true, map[string]float64{
			"lockstep_agent_publishes_total{result=written}":            1,
			"lockstep_agent_publishes_total{result=unchanged}":          1,
			"lockstep_agent_publishes_total{result=error}":              1,
			"lockstep_agent_last_publish_timestamp_seconds{node=gpu-0}": 1_700_000_010,
		}},
	}
	for _, step := range steps {
		clock.SetTime(clock.Now().Add(step.advance))
		failStatus = step.fail
		fresh := &corev1.Node{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(node), fresh); err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Publish(context.Background(), fresh, spec, step.status); (err != nil) != step.fail {
			t.Fatalf("%s: Publish = %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, nonZero(t, reg)); diff != "" {
			t.Errorf("%s: metrics (-want,+got):\n%s", step.name, diff)
		}
	}
	if err := pub.Ready(probe); err != nil {
		t.Errorf("not ready after a publish: %v", err)
	}
}

func TestRealAgentCountsDiscoveryErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		report *discovery.Report
		err    error
		want   map[string]float64
	}{
		{"NVML missing", context.Background(), nil, discovery.ErrNVMLNotFound,
			map[string]float64{"lockstep_agent_discovery_errors_total{source=nvml}": 1}},
		{"sysfs and kubelet unreadable", context.Background(),
			&discovery.Report{Unavailable: []discovery.Source{discovery.SourceSysfs, discovery.SourcePodResources}}, nil,
			map[string]float64{
				"lockstep_agent_discovery_errors_total{source=sysfs}":         1,
				"lockstep_agent_discovery_errors_total{source=pod-resources}": 1,
			}},
		{"all read", context.Background(), &discovery.Report{}, nil, map[string]float64{}},
		{"shutting down", cancelled, nil, context.Canceled, map[string]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newTestMetrics(t)
			a := &RealAgent{NodeName: "gpu-0", Metrics: m, Backend: backendFunc(func(context.Context) (*discovery.Report, error) {
				return tc.report, tc.err
			})}
			if _, err := a.discover(tc.ctx); !errors.Is(err, tc.err) {
				t.Fatalf("discover = %v, want %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, nonZero(t, reg)); diff != "" {
				t.Errorf("metrics (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestFakeReconcilerMetricsAndReadiness(t *testing.T) {
	m, reg := newTestMetrics(t)
	node := func(name, profile string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{lockstep.LabelProfile: profile}}}
	}
	c := fake.NewClientBuilder().WithScheme(agentScheme(t)).
		WithObjects(node("good", "hgx-h100"), node("odd", "no-such-profile")).
		WithStatusSubresource(&v1alpha1.NodeTopology{}).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(obj client.Object) []string {
			return []string{obj.(*corev1.Pod).Spec.NodeName}
		}).Build()
	selector, err := labels.Parse(lockstep.LabelProfile)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	r := &FakeReconciler{
		Client:       c,
		Publisher:    &Publisher{Client: c, Clock: clock, HeartbeatInterval: time.Minute, Mode: "fake", Metrics: m},
		Recorder:     record.NewFakeRecorder(10),
		NodeSelector: selector,
		Metrics:      m,
	}
	probe := httptest.NewRequest("GET", "/readyz", nil)
	if r.Ready(probe) == nil {
		t.Error("ready with two served nodes and nothing published")
	}
	ctx := context.Background()
	for _, name := range []string{"good", "odd"} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatalf("Reconcile %s: %v", name, err)
		}
	}
	if err := r.Ready(probe); err != nil {
		t.Errorf("not ready after publishing a node: %v", err)
	}
	want := map[string]float64{
		"lockstep_agent_discovery_errors_total{source=profile}":    1,
		"lockstep_agent_publishes_total{result=written}":           1,
		"lockstep_agent_last_publish_timestamp_seconds{node=good}": 1_700_000_000,
	}
	if diff := cmp.Diff(want, nonZero(t, reg)); diff != "" {
		t.Errorf("after publishing (-want,+got):\n%s", diff)
	}

	if err := c.Delete(ctx, node("good", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: "good"}}); err != nil {
		t.Fatal(err)
	}
	delete(want, "lockstep_agent_last_publish_timestamp_seconds{node=good}")
	if diff := cmp.Diff(want, nonZero(t, reg)); diff != "" {
		t.Errorf("after the node was deleted (-want,+got):\n%s", diff)
	}
}

func TestFakeReadyWithoutServedNodes(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(agentScheme(t)).
		WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-only"}}).Build()
	selector, err := labels.Parse(lockstep.LabelProfile)
	if err != nil {
		t.Fatal(err)
	}
	r := &FakeReconciler{Client: c, Publisher: &Publisher{}, NodeSelector: selector}
	if err := r.Ready(httptest.NewRequest("GET", "/readyz", nil)); err != nil {
		t.Errorf("not ready with nothing to serve: %v", err)
	}
}
