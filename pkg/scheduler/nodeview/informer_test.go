package nodeview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// TestNodeTopologyListSlimsEachPage lists NodeTopology from an API server
// that serves pages, through client-go's pager as the reflector does, and
// checks what the pager accumulates: every object slim (no per-node
// identifiers or metadata besides the kept fields) and sharing one GPU
// list, so whole objects never pile up over the pages. It also checks the
// requests: the current version ("" rather than the watch cache's "0"),
// in pages of nodeTopologyPageSize.
func TestNodeTopologyListSlimsEachPage(t *testing.T) {
	const nodes = 2*nodeTopologyPageSize + 7
	all := make([]v1alpha1.NodeTopology, nodes)
	for i := range all {
		all[i] = *agentNodeTopology(t, fmt.Sprintf("node-%d", i))
	}
	type request struct {
		ResourceVersion, Limit, Continue string
	}
	var requests []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		requests = append(requests, request{q.Get("resourceVersion"), q.Get("limit"), q.Get("continue")})
		limit, _ := strconv.Atoi(q.Get("limit"))
		start, _ := strconv.Atoi(q.Get("continue"))
		end := min(start+limit, len(all))
		list := v1alpha1.NodeTopologyList{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopologyList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "42"},
			Items:    all[start:end],
		}
		if end < len(all) {
			list.Continue = strconv.Itoa(end)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&list)
	}))
	defer srv.Close()

	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{
		Host: srv.URL,
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &v1alpha1.GroupVersion,
			NegotiatedSerializer: serializer.NewCodecFactory(scheme).WithoutConversion(),
		},
		APIPath: "/apis",
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	specs := newSpecTable()
	lw := nodeTopologyListWatch(rc, specs)
	// The reflector's first list: resourceVersion "0", no limit.
	obj, _, err := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return lw.ListWithContext(context.Background(), opts)
	})).ListWithAlloc(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}

	limit := strconv.Itoa(nodeTopologyPageSize)
	wantRequests := []request{
		{"", limit, ""},
		{"", limit, strconv.Itoa(nodeTopologyPageSize)},
		{"", limit, strconv.Itoa(2 * nodeTopologyPageSize)},
	}
	if diff := cmp.Diff(wantRequests, requests); diff != "" {
		t.Errorf("list requests (-want +got):\n%s", diff)
	}
	var items []*v1alpha1.NodeTopology
	err = meta.EachListItem(obj, func(o runtime.Object) error {
		nt, ok := o.(*v1alpha1.NodeTopology)
		if !ok {
			return fmt.Errorf("listed a %T", o)
		}
		items = append(items, nt)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != nodes {
		t.Fatalf("listed %d objects, want %d", len(items), nodes)
	}
	first := items[0]
	for _, nt := range items {
		want := metav1.ObjectMeta{Name: nt.Name, UID: types.UID("uid-" + nt.Name), Generation: 1}
		if diff := cmp.Diff(want, nt.ObjectMeta); diff != "" {
			t.Fatalf("%s: metadata as listed (-want +got):\n%s", nt.Name, diff)
		}
		for _, g := range nt.Spec.GPUs {
			if g.UUID != "" || g.PCIBusID != "" {
				t.Fatalf("%s: GPU %d listed with uuid %q, bus %q", nt.Name, g.Index, g.UUID, g.PCIBusID)
			}
		}
		if &nt.Spec.GPUs[0] != &first.Spec.GPUs[0] || &nt.Spec.Links[0] != &first.Spec.Links[0] {
			t.Fatalf("%s: GPU and link lists not shared with %s's", nt.Name, first.Name)
		}
	}
	// The store's transform finds the listed objects slim: the same object,
	// unchanged.
	again, err := specs.slim(first)
	if err != nil || again != any(first) {
		t.Errorf("slim(listed object) = %p, %v; want the object itself (%p)", again, err, first)
	}
}

// TestSlimNodeInformer: the scheduler's node informer, given the transform
// before it starts, stores nodes without managedFields and with everything
// else.
func TestSlimNodeInformer(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:          "node-0",
		Labels:        map[string]string{"fabric.topograph.run/tier-0": "leaf-0"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
	}}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(node.DeepCopy()), 0)
	if err := SlimNodeInformer(factory); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	got, err := factory.Core().V1().Nodes().Lister().Get(node.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := node.DeepCopy()
	want.ManagedFields = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored node (-want +got):\n%s", diff)
	}
	// Once the informer runs, the transform can no longer change.
	if err := SlimNodeInformer(factory); err == nil {
		t.Error("slimNodeInformer on a started informer: no error")
	}
}
