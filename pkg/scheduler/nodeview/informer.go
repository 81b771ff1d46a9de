package nodeview

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// nodeTopologyPageSize is how many NodeTopology objects one list request
// returns. A 5,000-node cluster's objects are about 75 MB of JSON: listed
// at once, the response and everything decoded from it are live together
// and raise the garbage collector's target, and so the scheduler's peak
// memory, for the rest of its life. Pages of 250 (~4 MB) bound that.
const nodeTopologyPageSize = 250

// NewInformer returns an informer on NodeTopology whose lists come in
// pages, with the view's Handler registered through register. A
// reflector's first list asks for resourceVersion "0", which the API
// server answers from its watch cache whole, ignoring the page size;
// asking for the current version ("") instead is paged. The informer
// stores objects slimmed by the view (see specTable).
func (v *View) NewInformer(cfg *rest.Config, scheme *runtime.Scheme, register Registrar) (cache.SharedIndexInformer, error) {
	specs := v.specs
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating the NodeTopology client: %w", err)
	}
	inf := cache.NewSharedIndexInformer(nodeTopologyListWatch(rc, specs), &v1alpha1.NodeTopology{}, 0, cache.Indexers{})
	specs.stored = inf.GetStore().GetByKey
	if err := inf.SetTransform(specs.slim); err != nil {
		return nil, err
	}
	if err := register(inf, v.Handler()); err != nil {
		return nil, err
	}
	return inf, nil
}

// nodeTopologyListWatch lists NodeTopology in pages of nodeTopologyPageSize
// and slims each page as it arrives. The reflector's pager keeps every page
// until the last one comes and only then hands the objects to the store,
// whose transform would slim them: on 5,000 nodes the whole decoded objects
// (about 8 KiB each) were live together, some 45 MiB at the scheduler's
// start, and that heap's pages stayed in its resident memory. Slimmed per
// page, one page of whole objects is live at a time; the store's transform
// finds them slim already (slim is idempotent).
func nodeTopologyListWatch(rc rest.Interface, specs *specTable) *cache.ListWatch {
	params := metav1.ParameterCodec
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if opts.ResourceVersion == "0" {
				opts.ResourceVersion = ""
			}
			if opts.Limit == 0 || opts.Limit > nodeTopologyPageSize {
				opts.Limit = nodeTopologyPageSize
			}
			list := &v1alpha1.NodeTopologyList{}
			if err := rc.Get().Resource("nodetopologies").VersionedParams(&opts, params).Do(ctx).Into(list); err != nil {
				return list, err
			}
			for i := range list.Items {
				// slim changes the object in place and never fails for a
				// NodeTopology.
				_, _ = specs.slim(&list.Items[i])
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return rc.Get().Resource("nodetopologies").VersionedParams(&opts, params).Watch(ctx)
		},
	}
}

// SlimNodeInformer has the scheduler's node informer drop managedFields,
// as kube-scheduler's own pod informer does for pods: no plugin reads them,
// and on 5,000 nodes they are some 9 MiB of the informer's store, counted
// twice in the process's memory once the garbage collector's target
// follows the live heap. The profiles' plugins are built before the
// scheduler starts its informers, so the transform applies from the first
// list; an informer already running (another component started the factory)
// keeps its objects whole, which costs only memory.
func SlimNodeInformer(factory informers.SharedInformerFactory) error {
	return factory.Core().V1().Nodes().Informer().SetTransform(ctrlcache.TransformStripManagedFields())
}
