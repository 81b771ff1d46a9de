package coscheduling

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
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

type fakeHandle struct {
	framework.Handle
	pods []*fakeWaitingPod
}

func (h *fakeHandle) IterateOverWaitingPods(cb func(framework.WaitingPod)) {
	for _, p := range h.pods {
		cb(p)
	}
}

// TestRenamingHandle: upstream allows and rejects waiting pods as
// "Coscheduling"; the framework made them wait for Name, so an Allow under
// the upstream name would never release them.
func TestRenamingHandle(t *testing.T) {
	wp := &fakeWaitingPod{pod: &v1.Pod{}}
	h := renamingHandle{Handle: &fakeHandle{pods: []*fakeWaitingPod{wp}}}
	h.IterateOverWaitingPods(func(w framework.WaitingPod) {
		w.Allow("Coscheduling")
		w.Reject("Coscheduling", "rejection in Unreserve")
	})
	if diff := cmp.Diff([]string{Name}, wp.allowed); diff != "" {
		t.Errorf("allowed as (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{Name}, wp.rejects); diff != "" {
		t.Errorf("rejected as (-want +got):\n%s", diff)
	}
}

// informerHandle is a handle with a pod informer and nothing else.
type informerHandle struct {
	framework.Handle
	factory informers.SharedInformerFactory
}

func (h informerHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }

// TestRenamingHandlePodLister: upstream lists a gang's pods through the
// handle's pod lister; through renamingHandle it gets the PodGroup index's
// answer, which is the plain lister's, and every other selector the plain
// lister's too.
func TestRenamingHandlePodLister(t *testing.T) {
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
	wrapped := renamingHandle{Handle: informerHandle{factory: factory}}.SharedInformerFactory().Core().V1().Pods().Lister()
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
		for lister, l := range map[string]corev1listers.PodLister{"plain": plain, "renamingHandle": wrapped} {
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
