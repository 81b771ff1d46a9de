package podgroupindex

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
)

func pod(ns, name string, lbls map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
}

func inGroup(ns, name, group string) *v1.Pod {
	return pod(ns, name, map[string]string{schedv1alpha1.PodGroupLabel: group, "role": "worker"})
}

// testPods: two gangs in ns, one of the same name in another namespace, a
// pod with an empty pod-group label and one without the label.
func testPods() []*v1.Pod {
	return []*v1.Pod{
		inGroup("ns", "a-0", "a"),
		inGroup("ns", "a-1", "a"),
		inGroup("ns", "b-0", "b"),
		inGroup("other", "a-0", "a"),
		inGroup("ns", "empty", ""),
		pod("ns", "loose", map[string]string{"role": "worker"}),
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestPodGroupOf(t *testing.T) {
	l := schedv1alpha1.PodGroupLabel
	for _, tc := range []struct {
		selector labels.Selector
		want     string
		wantOK   bool
	}{
		{labels.SelectorFromSet(labels.Set{l: "g"}), "g", true},
		{labels.SelectorFromSet(labels.Set{l: ""}), "", true},
		{mustSelector(t, l+"==g"), "g", true},
		{mustSelector(t, l+" in (g)"), "g", true},
		{mustSelector(t, l+" in (g,h)"), "", false},
		{mustSelector(t, l+"!=g"), "", false},
		{mustSelector(t, l), "", false},
		{mustSelector(t, "!"+l), "", false},
		{mustSelector(t, l+"=g,role=worker"), "", false},
		{labels.SelectorFromSet(labels.Set{"role": "worker"}), "", false},
		{labels.Everything(), "", false},
		{labels.Nothing(), "", false},
	} {
		t.Run(tc.selector.String(), func(t *testing.T) {
			got, ok := podGroupOf(tc.selector)
			if diff := cmp.Diff([]any{tc.want, tc.wantOK}, []any{got, ok}); diff != "" {
				t.Errorf("podGroupOf (-want,+got):\n%s", diff)
			}
		})
	}
}

// newInformer returns a pod informer of a fake clientset holding pods, its
// store filled without starting it, as the plugins' tests do.
func newInformer(t testing.TB, pods []*v1.Pod, register bool) informers.SharedInformerFactory {
	t.Helper()
	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(), 0)
	informer := factory.Core().V1().Pods().Informer()
	if register {
		if err := Register(informer); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return factory
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

// TestLister: Informer's lister answers every selector as the plain lister
// does, from the index or not.
func TestLister(t *testing.T) {
	l := schedv1alpha1.PodGroupLabel
	for _, tc := range []struct {
		ns       string
		selector labels.Selector
		want     []string
	}{
		{"ns", labels.SelectorFromSet(labels.Set{l: "a"}), []string{"ns/a-0", "ns/a-1"}},
		{"other", labels.SelectorFromSet(labels.Set{l: "a"}), []string{"other/a-0"}},
		{"ns", labels.SelectorFromSet(labels.Set{l: "b"}), []string{"ns/b-0"}},
		{"ns", labels.SelectorFromSet(labels.Set{l: "missing"}), nil},
		{"nowhere", labels.SelectorFromSet(labels.Set{l: "a"}), nil},
		{"ns", labels.SelectorFromSet(labels.Set{l: ""}), []string{"ns/empty"}},
		{"ns", mustSelector(t, l+" in (a)"), []string{"ns/a-0", "ns/a-1"}},
		{"ns", mustSelector(t, l+" in (a,b)"), []string{"ns/a-0", "ns/a-1", "ns/b-0"}},
		{"ns", mustSelector(t, l+"=a,role=worker"), []string{"ns/a-0", "ns/a-1"}},
		{"ns", mustSelector(t, "!"+l), []string{"ns/loose"}},
		{"ns", labels.Everything(), []string{"ns/a-0", "ns/a-1", "ns/b-0", "ns/empty", "ns/loose"}},
	} {
		t.Run(tc.ns+"/"+tc.selector.String(), func(t *testing.T) {
			for _, register := range []bool{true, false} {
				factory := newInformer(t, testPods(), register)
				plain, err := factory.Core().V1().Pods().Lister().Pods(tc.ns).List(tc.selector)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, names(plain)); diff != "" {
					t.Fatalf("plain lister (-want,+got):\n%s", diff)
				}
				got, err := Informer(factory.Core().V1().Pods()).Lister().Pods(tc.ns).List(tc.selector)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, names(got)); diff != "" {
					t.Errorf("index registered %v: wrapped lister (-want,+got):\n%s", register, diff)
				}
			}
		})
	}
}

// TestMembersFollowsUpdates: the index follows a pod moved to another gang
// and a deleted pod.
func TestMembersFollowsUpdates(t *testing.T) {
	factory := newInformer(t, testPods(), true)
	indexer := factory.Core().V1().Pods().Informer().GetIndexer()
	if err := indexer.Update(inGroup("ns", "a-1", "b")); err != nil {
		t.Fatal(err)
	}
	if err := indexer.Delete(inGroup("ns", "b-0", "b")); err != nil {
		t.Fatal(err)
	}
	for group, want := range map[string][]string{"a": {"ns/a-0"}, "b": {"ns/a-1"}} {
		got, err := Members(factory.Core().V1().Pods(), "ns", group)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, names(got)); diff != "" {
			t.Errorf("members of %s (-want,+got):\n%s", group, diff)
		}
	}
}

// TestRegister: registering twice is harmless, and an informer that has
// started and synced builds the index from its store.
func TestRegister(t *testing.T) {
	var objs []runtime.Object
	for _, p := range testPods() {
		objs = append(objs, p)
	}
	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(objs...), 0)
	informer := factory.Core().V1().Pods().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	for range 2 {
		if err := Register(informer); err != nil {
			t.Fatalf("Register on a started informer: %v", err)
		}
	}
	got, err := informer.GetIndexer().ByIndex(IndexName, key("ns", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("index of ns/a has %d pods, want 2", len(got))
	}
}

// BenchmarkMembers lists a gang among 14,000 pods of one namespace (the
// scale run's mixed burst) with the plain lister and from the index.
func BenchmarkMembers(b *testing.B) {
	const podsInNamespace = 14_000
	for _, gang := range []int{8, 1024} {
		var pods []*v1.Pod
		for i := range gang {
			pods = append(pods, inGroup("ns", fmt.Sprintf("g-%d", i), "g"))
		}
		for i := range podsInNamespace - gang {
			pods = append(pods, inGroup("ns", fmt.Sprintf("o-%d", i), fmt.Sprintf("o-%d", i/8)))
		}
		factory := newInformer(b, pods, true)
		selector := labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: "g"})
		for _, lister := range []struct {
			name string
			pi   corev1informers.PodInformer
		}{{"plain", factory.Core().V1().Pods()}, {"index", Informer(factory.Core().V1().Pods())}} {
			b.Run(fmt.Sprintf("gang=%d/lister=%s", gang, lister.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					got, err := lister.pi.Lister().Pods("ns").List(selector)
					if err != nil || len(got) != gang {
						b.Fatalf("listed %d pods (%v), want %d", len(got), err, gang)
					}
				}
			})
		}
	}
}
