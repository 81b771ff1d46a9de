package coscheduling

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/scheduler-plugins/apis/config"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/requeue"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func TestDecodeArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     runtime.Object
		want    *config.CoschedulingArgs
		wantErr bool
	}{{
		name: "none: upstream defaults",
		want: &config.CoschedulingArgs{PermitWaitingTimeSeconds: 60, PodGroupBackoffSeconds: 0, PodGroupRejectPercentage: 10},
	}, {
		name: "deployed args",
		obj:  &runtime.Unknown{Raw: []byte("permitWaitingTimeSeconds: 30\npodGroupBackoffSeconds: 0\n")},
		want: &config.CoschedulingArgs{PermitWaitingTimeSeconds: 30, PodGroupBackoffSeconds: 0, PodGroupRejectPercentage: 10},
	}, {
		name: "JSON",
		obj:  &runtime.Unknown{Raw: []byte(`{"podGroupRejectPercentage": 0}`)},
		want: &config.CoschedulingArgs{PermitWaitingTimeSeconds: 60, PodGroupBackoffSeconds: 0, PodGroupRejectPercentage: 0},
	}, {
		name:    "misspelt field",
		obj:     &runtime.Unknown{Raw: []byte("permitWaitingTimeSecond: 30\n")},
		wantErr: true,
	}, {
		name:    "a field twice",
		obj:     &runtime.Unknown{Raw: []byte("permitWaitingTimeSeconds: 30\npermitWaitingTimeSeconds: 40\n")},
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeArgs(tc.obj)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEventsToRegister: every event carries a hint (an event without one
// always requeues), and the capacity events that upstream misses are there.
func TestEventsToRegister(t *testing.T) {
	events, err := (&Coscheduling{}).EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range events {
		if e.QueueingHintFn == nil {
			t.Errorf("%s has no QueueingHintFn", e.Event.Label())
		}
		got[e.Event.Label()] = true
	}
	for _, want := range []fwk.ClusterEvent{
		{Resource: fwk.Pod, ActionType: fwk.Delete},
		{Resource: fwk.Pod, ActionType: fwk.UpdatePodScaleDown},
		{Resource: fwk.Node, ActionType: requeue.NodeActions},
		{Resource: requeue.PodGroupResource, ActionType: fwk.Add | fwk.Update},
		{Resource: fwk.Pod, ActionType: fwk.Add | fwk.UpdatePodSchedulingGatesEliminated},
	} {
		if !got[want.Label()] {
			t.Errorf("missing event %s; have %v", want.Label(), got)
		}
	}
}

// fakeWaitingPod records the plugin names it is allowed and rejected by.
type fakeWaitingPod struct {
	pod              *v1.Pod
	allowed, rejects []string
}

func (w *fakeWaitingPod) GetPod() *v1.Pod             { return w.pod }
func (w *fakeWaitingPod) GetPendingPlugins() []string { return []string{Name} }
func (w *fakeWaitingPod) Allow(name string)           { w.allowed = append(w.allowed, name) }
func (w *fakeWaitingPod) Reject(name, _ string)       { w.rejects = append(w.rejects, name) }

// fakeHandle is the framework's handle as the plugin uses it: its waiting
// pods.
type fakeHandle struct {
	framework.Handle
	pods []*fakeWaitingPod
}

func (h *fakeHandle) IterateOverWaitingPods(cb func(framework.WaitingPod)) {
	for _, p := range h.pods {
		cb(p)
	}
}

// TestWaitingPodsAnswerToName: the framework makes a pod wait for the
// plugin that said Wait, this one, so it must allow and reject its waiting
// pods as Name: an Allow under another name (upstream's "Coscheduling")
// would never release them. Permit allows the gang's waiting members when
// the last one arrives; Unreserve and PostFilter reject them, and only
// them.
func TestWaitingPodsAnswerToName(t *testing.T) {
	gang := []*v1.Pod{
		utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(),
		utiltesting.MakePod("g-1", "ns").GPUs(2).PodGroup("g").Obj(),
	}
	other := utiltesting.MakePod("h-0", "ns").GPUs(2).PodGroup("h").Obj()
	type answers struct{ Allowed, Rejects map[string][]string }
	for _, tc := range []struct {
		name string
		// run calls the plugin; the gang's first member waits at Permit.
		run  func(t *testing.T, p *Coscheduling)
		want answers
	}{{
		name: "Permit of the last member allows the waiting ones",
		run: func(t *testing.T, p *Coscheduling) {
			status, wait := p.Permit(context.Background(), framework.NewCycleState(), gang[1], "n")
			if !status.IsSuccess() || wait != 0 {
				t.Errorf("Permit of the last member = %v, %v; want success, no wait", status, wait)
			}
		},
		want: answers{Allowed: map[string][]string{"g-0": {Name}}},
	}, {
		name: "Unreserve rejects the waiting ones",
		run: func(t *testing.T, p *Coscheduling) {
			p.Unreserve(context.Background(), framework.NewCycleState(), gang[1], "n")
		},
		want: answers{Rejects: map[string][]string{"g-0": {Name}}},
	}, {
		name: "PostFilter rejects the waiting ones",
		run: func(t *testing.T, p *Coscheduling) {
			_, status := p.PostFilter(context.Background(), framework.NewCycleState(), gang[1], nil)
			if status.Code() != fwk.Unschedulable {
				t.Errorf("PostFilter = %v, want Unschedulable", status)
			}
		},
		want: answers{Rejects: map[string][]string{"g-0": {Name}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := &fakeHandle{pods: []*fakeWaitingPod{{pod: gang[0]}, {pod: other}}}
			p, _ := newTestPlugin(t, h, []*v1.Pod{gang[0], gang[1], other}, nil,
				utiltesting.MakePodGroup("g", "ns", 2).Obj(), utiltesting.MakePodGroup("h", "ns", 2).Obj())
			status, wait := p.Permit(context.Background(), framework.NewCycleState(), gang[0], "n")
			if status.Code() != fwk.Wait || wait != 30*time.Second {
				t.Fatalf("Permit of the first member = %v, %v; want Wait, 30s", status, wait)
			}
			tc.run(t, p)
			got := answers{}
			for _, wp := range h.pods {
				if len(wp.allowed) > 0 {
					if got.Allowed == nil {
						got.Allowed = map[string][]string{}
					}
					got.Allowed[wp.pod.Name] = wp.allowed
				}
				if len(wp.rejects) > 0 {
					if got.Rejects == nil {
						got.Rejects = map[string][]string{}
					}
					got.Rejects[wp.pod.Name] = wp.rejects
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("waiting pods (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestManagerPodLister: the manager lists a gang's pods through the pod
// informer New gives it; that one's lister answers from the PodGroup index,
// which is the plain lister's answer, and every other selector the plain
// lister's too.
func TestManagerPodLister(t *testing.T) {
	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(), 0)
	informer := factory.Core().V1().Pods().Informer()
	if err := podgroupindex.Register(informer); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []*v1.Pod{
		utiltesting.MakePod("a-0", "ns").PodGroup("a").Obj(),
		utiltesting.MakePod("a-1", "ns").PodGroup("a").Obj(),
		utiltesting.MakePod("b-0", "ns").PodGroup("b").Obj(),
		utiltesting.MakePod("a-0", "other").PodGroup("a").Obj(),
		utiltesting.MakePod("loose", "ns").Obj(),
	} {
		if err := informer.GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	indexed := podgroupindex.Informer(factory.Core().V1().Pods()).Lister()
	plain := factory.Core().V1().Pods().Lister()
	for _, tc := range []struct {
		ns       string
		selector labels.Selector
		want     []string
	}{
		{"ns", labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: "a"}), []string{"a-0", "a-1"}},
		{"other", labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: "a"}), []string{"a-0"}},
		{"ns", labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: "c"}), nil},
		{"ns", labels.Everything(), []string{"a-0", "a-1", "b-0", "loose"}},
	} {
		for lister, l := range map[string]corev1listers.PodLister{"plain": plain, "indexed": indexed} {
			pods, err := l.Pods(tc.ns).List(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, pod := range pods {
				got = append(got, pod.Name)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s lister, %s in %s (-want,+got):\n%s", lister, tc.selector, tc.ns, diff)
			}
		}
	}
}

// TestLess: the queue runs by priority, then by the creation of the pod's
// PodGroup (the pod's own first attempt outside gangs), then by name, so a
// gang's members come one after another; a PodGroup that failed recently
// counts from its failure.
func TestLess(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pg := func(name string, created time.Time) *schedv1alpha1.PodGroup {
		g := utiltesting.MakePodGroup(name, "ns", 2).Obj()
		g.CreationTimestamp = metav1.NewTime(created)
		return g
	}
	p, _ := newTestPlugin(t, &fakeHandle{}, nil, nil, pg("old", t0), pg("new", t0.Add(time.Minute)))
	queued := func(pod *v1.Pod, attempt time.Time) fwk.QueuedPodInfo {
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			t.Fatal(err)
		}
		return &framework.QueuedPodInfo{PodInfo: pi, InitialAttemptTimestamp: &attempt}
	}
	high := utiltesting.MakePod("z-high", "ns").PodGroup("new").Obj()
	high.Spec.Priority = new(int32)
	*high.Spec.Priority = 10
	pods := map[string]fwk.QueuedPodInfo{
		"high":  queued(high, t0.Add(time.Hour)),
		"old-1": queued(utiltesting.MakePod("old-1", "ns").PodGroup("old").Obj(), t0.Add(time.Hour)),
		"old-0": queued(utiltesting.MakePod("old-0", "ns").PodGroup("old").Obj(), t0.Add(2*time.Hour)),
		"new-0": queued(utiltesting.MakePod("new-0", "ns").PodGroup("new").Obj(), t0),
		"loose": queued(utiltesting.MakePod("loose", "ns").Obj(), t0.Add(30*time.Second)),
	}
	order := func() []string {
		names := []string{"loose", "new-0", "old-0", "old-1", "high"}
		slices.SortStableFunc(names, func(a, b string) int {
			switch {
			case p.Less(pods[a], pods[b]):
				return -1
			case p.Less(pods[b], pods[a]):
				return 1
			}
			return 0
		})
		return names
	}
	if diff := cmp.Diff([]string{"high", "old-0", "old-1", "loose", "new-0"}, order()); diff != "" {
		t.Errorf("queue order (-want,+got):\n%s", diff)
	}
	p.mgr.MarkPodGroupScheduleFailure("ns/old")
	if diff := cmp.Diff([]string{"high", "loose", "new-0", "old-0", "old-1"}, order()); diff != "" {
		t.Errorf("queue order after ns/old failed (-want,+got):\n%s", diff)
	}
}
