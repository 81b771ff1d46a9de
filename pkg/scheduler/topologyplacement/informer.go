package topologyplacement

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// nodeTopologyPageSize is how many NodeTopology objects one list request
// returns. A 5,000-node cluster's objects are about 75 MB of JSON: listed
// at once, the response and everything decoded from it are live together
// and raise the garbage collector's target, and so the scheduler's peak
// memory, for the rest of its life. Pages of 250 (~4 MB) bound that.
const nodeTopologyPageSize = 250

// newNodeTopologyInformer returns an informer on NodeTopology whose lists
// come in pages. A reflector's first list asks for resourceVersion "0",
// which the API server answers from its watch cache whole, ignoring the
// page size; asking for the current version ("") instead is paged. The
// informer stores objects slimmed by specs (see specTable).
func newNodeTopologyInformer(cfg *rest.Config, scheme *runtime.Scheme, specs *specTable) (cache.SharedIndexInformer, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating the NodeTopology client: %w", err)
	}
	params := metav1.ParameterCodec
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if opts.ResourceVersion == "0" {
				opts.ResourceVersion = ""
			}
			if opts.Limit == 0 || opts.Limit > nodeTopologyPageSize {
				opts.Limit = nodeTopologyPageSize
			}
			list := &v1alpha1.NodeTopologyList{}
			err := rc.Get().Resource("nodetopologies").VersionedParams(&opts, params).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return rc.Get().Resource("nodetopologies").VersionedParams(&opts, params).Watch(ctx)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.NodeTopology{}, 0, cache.Indexers{})
	specs.stored = inf.GetStore().GetByKey
	if err := inf.SetTransform(specs.slim); err != nil {
		return nil, err
	}
	return inf, nil
}
