package topologyplacement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestGangPods: the plugin's gang listing through the PodGroup index gives
// the plain lister's answer for the selector pod-group=name, and so does
// the fallback without the index.
func TestGangPods(t *testing.T) {
	pods := []*v1.Pod{
		utiltesting.MakePod("a-0", "ns").GPUs(8).PodGroup("a").Obj(),
		utiltesting.MakePod("a-1", "ns").GPUs(8).PodGroup("a").Obj(),
		utiltesting.MakePod("b-0", "ns").GPUs(4).PodGroup("b").Obj(),
		utiltesting.MakePod("a-0", "other").GPUs(8).PodGroup("a").Obj(),
		utiltesting.MakePod("single", "ns").GPUs(1).Obj(),
	}
	pods[1].Spec.NodeName = "n"
	clientset := clientsetfake.NewClientset()
	indexed := podInformers(t, clientset, pods)
	plain := informers.NewSharedInformerFactory(clientset, 0)
	for _, pod := range pods {
		if err := plain.Core().V1().Pods().Informer().GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ ns, group string }{
		{"ns", "a"}, {"ns", "b"}, {"other", "a"}, {"other", "b"}, {"ns", "missing"}, {"nowhere", "a"},
	} {
		t.Run(tc.ns+"/"+tc.group, func(t *testing.T) {
			want, err := indexed.Core().V1().Pods().Lister().Pods(tc.ns).List(labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: tc.group}))
			if err != nil {
				t.Fatal(err)
			}
			p, _ := newTestPlugin(t)
			p.handle = &fakeHandle{clientset: clientset, informers: indexed}
			got, err := p.gangs.GangPods(tc.ns, tc.group)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(podNames(want), podNames(got)); diff != "" {
				t.Errorf("gangPods (-lister,+got):\n%s", diff)
			}
		})
	}
}

func podNames(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s/%s", p.Namespace, p.Name))
	}
	slices.Sort(out)
	return out
}
