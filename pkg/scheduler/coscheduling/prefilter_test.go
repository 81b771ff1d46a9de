package coscheduling

import (
	"context"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	upstream "sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestPreFilterSingleMember: a PodGroup of one member skips upstream's
// PreFilter (its cluster-wide minResources sum, which Filter checks per
// node for the one pod); a gang of more still gets upstream's answer,
// minResources gap and missing siblings included.
func TestPreFilterSingleMember(t *testing.T) {
	gpus := func(n int64) v1.ResourceList {
		return v1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	// More GPUs than the one 4-GPU node has: upstream's sum says no.
	tooBig := func(g *schedv1alpha1.PodGroup) *schedv1alpha1.PodGroup {
		g.Spec.MinResources = gpus(64)
		return g
	}
	pods := []*v1.Pod{
		utiltesting.MakePod("single-0", "ns").GPUs(2).PodGroup("single").Obj(),
		utiltesting.MakePod("gang-0", "ns").GPUs(2).PodGroup("gang").Obj(),
		utiltesting.MakePod("gang-1", "ns").GPUs(2).PodGroup("gang").Obj(),
		utiltesting.MakePod("short-0", "ns").GPUs(2).PodGroup("short").Obj(),
		utiltesting.MakePod("loose", "ns").GPUs(2).Obj(),
	}
	scheme := runtime.NewScheme()
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		tooBig(utiltesting.MakePodGroup("single", "ns", 1).Obj()),
		tooBig(utiltesting.MakePodGroup("gang", "ns", 2).Obj()),
		utiltesting.MakePodGroup("short", "ns", 3).Obj(),
	).Build()
	factory := informers.NewSharedInformerFactory(clientsetfake.NewClientset(), 0)
	podInformer := factory.Core().V1().Pods()
	for _, pod := range pods {
		if err := podInformer.Informer().GetIndexer().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	timeout := 30 * time.Second
	mgr := core.NewPodGroupManager(client, internalcache.NewSnapshot(nil, []*v1.Node{gpuNode("a")}), &timeout, podInformer)
	cs := &upstream.Coscheduling{}
	setPodGroupManager(t, cs, mgr)
	plugin := &Coscheduling{Coscheduling: cs, mgr: mgr}

	got := map[string]fwk.Code{}
	for _, pod := range pods {
		_, status := plugin.PreFilter(context.Background(), nil, pod, nil)
		got[pod.Name] = status.Code()
	}
	want := map[string]fwk.Code{
		"single-0": fwk.Success,
		"gang-0":   fwk.UnschedulableAndUnresolvable, // resource gap
		"gang-1":   fwk.UnschedulableAndUnresolvable,
		"short-0":  fwk.UnschedulableAndUnresolvable, // 1 of 3 members
		"loose":    fwk.Success,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PreFilter codes (-want +got):\n%s", diff)
	}
}

// setPodGroupManager sets the plugin's unexported manager, the field
// podGroupManager reads.
func setPodGroupManager(t *testing.T, cs *upstream.Coscheduling, mgr *core.PodGroupManager) {
	t.Helper()
	field := reflect.ValueOf(cs).Elem().FieldByName("pgMgr")
	if !field.IsValid() {
		t.Fatal("upstream Coscheduling has no pgMgr field")
	}
	reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Set(reflect.ValueOf(mgr))
}
