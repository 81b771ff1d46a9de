// Package podgroupindex is the one index of the scheduler's pod informer by
// PodGroup (namespace and pod-group label value) that TopologyPlacement and
// LockstepCoscheduling share.
//
// Why. Both plugins list a gang's pods by a label selector on every
// PreFilter and plan. A lister answers a selector by walking every pod of
// the namespace (cache.ListAllByNamespace), so with one namespace of 14,000
// pods a gang member's PreFilter cost O(namespace) and a gang's
// O(members × namespace). The index answers in O(gang).
//
// Coscheduling's PodGroup manager (scheduler-plugins' core.PodGroupManager,
// which LockstepCoscheduling builds) lists a gang's pods through the pod
// informer it is given, so Informer gives it one whose lister answers the
// one selector it uses from the index.
package podgroupindex

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	corev1informers "k8s.io/client-go/informers/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
)

// IndexName names the index on the pod informer.
const IndexName = "lockstep.dev/pod-group"

// key is the index value of the pods of PodGroup name in namespace ns.
func key(ns, name string) string { return ns + "/" + name }

// indexFunc indexes a pod that carries the pod-group label, even with an
// empty value: a selector pod-group= matches exactly those, and the index
// must answer it as the lister would.
func indexFunc(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	name, ok := pod.Labels[schedv1alpha1.PodGroupLabel]
	if !ok {
		return nil, nil
	}
	return []string{key(pod.Namespace, name)}, nil
}

// Register adds the index to the pod informer. Both plugins call it from
// New; the second call finds the index there. An informer that has already
// started builds the index from its store (client-go allows that since
// v0.28); one that has stopped refuses, and then Members falls back to the
// lister, correct if slower, so the error is for the caller to log.
func Register(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[IndexName]; ok {
		return nil
	}
	return informer.AddIndexers(cache.Indexers{IndexName: indexFunc})
}

// Members returns the pods of namespace ns labeled with PodGroup name, as
// pi's lister does for the selector pod-group=name: from the index when
// Register added it, from the lister otherwise. The pods are the cache's;
// callers must not modify them.
func Members(pi corev1informers.PodInformer, ns, name string) ([]*v1.Pod, error) {
	indexer := pi.Informer().GetIndexer()
	if _, ok := indexer.GetIndexers()[IndexName]; !ok {
		return pi.Lister().Pods(ns).List(labels.SelectorFromSet(labels.Set{schedv1alpha1.PodGroupLabel: name}))
	}
	objs, err := indexer.ByIndex(IndexName, key(ns, name))
	if err != nil {
		return nil, err
	}
	pods := make([]*v1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*v1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// podGroupOf reports the PodGroup a selector asks for when it is exactly one
// requirement pod-group=name (=, == or in with one value), the shape every
// gang listing has; anything else goes to the lister.
func podGroupOf(selector labels.Selector) (string, bool) {
	reqs, selectable := selector.Requirements()
	if !selectable || len(reqs) != 1 || reqs[0].Key() != schedv1alpha1.PodGroupLabel {
		return "", false
	}
	switch reqs[0].Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
	default:
		return "", false
	}
	values := reqs[0].ValuesUnsorted()
	if len(values) != 1 {
		return "", false
	}
	return values[0], true
}

// Informer returns pi whose lister answers List(pod-group=name) in a
// namespace from the index (Members) and every other call as pi's own
// lister. Everything else is pi's.
func Informer(pi corev1informers.PodInformer) corev1informers.PodInformer {
	return podInformer{pi}
}

type podInformer struct{ corev1informers.PodInformer }

func (pi podInformer) Lister() corev1listers.PodLister {
	return podLister{PodLister: pi.PodInformer.Lister(), informer: pi.PodInformer}
}

type podLister struct {
	corev1listers.PodLister
	informer corev1informers.PodInformer
}

func (l podLister) Pods(ns string) corev1listers.PodNamespaceLister {
	return namespaceLister{PodNamespaceLister: l.PodLister.Pods(ns), informer: l.informer, ns: ns}
}

type namespaceLister struct {
	corev1listers.PodNamespaceLister
	informer corev1informers.PodInformer
	ns       string
}

func (l namespaceLister) List(selector labels.Selector) ([]*v1.Pod, error) {
	if name, ok := podGroupOf(selector); ok {
		return Members(l.informer, l.ns, name)
	}
	return l.PodNamespaceLister.List(selector)
}
