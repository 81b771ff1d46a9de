package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// The fake agent plays NVIDIA's DRA driver for ComputeDomains, so that the
// local cluster runs multi-node NVLink jobs end to end with the real
// DynamicResources plugin allocating their channels. It lives in the fake
// agent because that process already serves every fake node (as the
// driver's kubelet plugin serves its node) and runs as one writer; a
// separate process would add a component, an identity and a port to the
// harness for the same informers.
//
// ChannelSliceReconciler is the kubelet plugin's publication;
// ComputeDomainStandIn is the driver's controller, with the IMEX daemons'
// reports folded in (a node joins its domain once a channel of the domain
// is allocated and reserved for a pod there).

// ChannelSliceReconciler publishes, for every served node in a multi-node
// NVLink domain (labelled for the topology's NVLink level), the
// ResourceSlice of the compute-domain driver's devices as NVIDIA's kubelet
// plugin does (computedomain.NodeSlice), owned by the Node. Other nodes get
// none, and a node that leaves its NVLink domain loses its slice.
//
// Reconcile is keyed by node name.
type ChannelSliceReconciler struct {
	Client       client.Client
	NodeSelector labels.Selector
	Topology     lockstep.TopologyConfig
}

// SetupWithManager follows the served nodes and their slices.
func (r *ChannelSliceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("compute-domain-slices").
		For(&corev1.Node{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return r.NodeSelector.Matches(labels.Set(o.GetLabels()))
		}), predicate.LabelChangedPredicate{})).
		Owns(&resourcev1.ResourceSlice{}).
		Complete(r)
}

// multiNodeNVLink says whether node is in a multi-node NVLink domain.
func (r *ChannelSliceReconciler) multiNodeNVLink(node *corev1.Node) bool {
	level, ok := r.Topology.NVLinkLevel()
	return ok && node.Labels[level.LabelKey] != "" && r.NodeSelector.Matches(labels.Set(node.Labels))
}

// Reconcile creates or deletes the node's compute-domain slice.
func (r *ChannelSliceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		// A deleted node's slice goes with it (owner reference).
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want := computedomain.NodeSlice(node.Name, 1)
	have := &resourcev1.ResourceSlice{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	case !r.multiNodeNVLink(node):
		if err == nil {
			return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, have))
		}
		return ctrl.Result{}, nil
	case err == nil:
		return ctrl.Result{}, nil
	}
	if err := controllerutil.SetControllerReference(node, want, r.Client.Scheme()); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("publishing ResourceSlice %s: %w", want.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Published the compute-domain channel slice", "node", klog.KObj(node))
	return ctrl.Result{}, nil
}

// ComputeDomainStandIn stands in for NVIDIA's ComputeDomain controller:
// for every ComputeDomain it writes the channel ResourceClaimTemplate the
// driver writes (computedomain.ChannelClaimTemplate; owned by the domain
// here, for the garbage collector, where the driver deletes its own behind
// a finalizer), and keeps the domain's status: the nodes whose channel is
// allocated to a pod, each Ready, and Ready overall once numNodes nodes
// are — NotReady until then, as the driver reports it while IMEX daemons
// start.
//
// Reconcile is keyed by ComputeDomain.
type ComputeDomainStandIn struct {
	Client   client.Client
	Topology lockstep.TopologyConfig
}

// SetupWithManager follows ComputeDomains, their claim templates and the
// channel claims of their pods.
func (r *ComputeDomainStandIn) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("compute-domain-stand-in").
		For(computedomain.NewObject()).
		Owns(&resourcev1.ResourceClaimTemplate{}).
		Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.domainsOfClaim)).
		Complete(r)
}

// domainsOfClaim maps a channel claim to its domains in the namespace.
func (r *ComputeDomainStandIn) domainsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	claim, ok := o.(*resourcev1.ResourceClaim)
	if !ok || len(channelDomains(claim)) == 0 {
		return nil
	}
	list := computedomain.NewList()
	if err := r.Client.List(ctx, list, client.InNamespace(claim.Namespace)); err != nil {
		klog.FromContext(ctx).Error(err, "Listing ComputeDomains", "namespace", claim.Namespace)
		return nil
	}
	var reqs []reconcile.Request
	for _, cd := range list.Items {
		if slices.Contains(channelDomains(claim), cd.GetUID()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cd.GetNamespace(), Name: cd.GetName()}})
		}
	}
	return reqs
}

// Reconcile writes the domain's claim template and status.
func (r *ComputeDomainStandIn) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := computedomain.NewObject()
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cd, err := computedomain.FromUnstructured(u)
	if err != nil || cd.DeletionTimestamp != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureTemplate(ctx, cd); err != nil {
		return ctrl.Result{}, err
	}
	var claims resourcev1.ResourceClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(cd.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	cliques := map[string]string{}
	if level, ok := r.Topology.NVLinkLevel(); ok {
		for _, node := range joinedNodes(cd.UID, claims.Items) {
			n := &corev1.Node{}
			if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, n); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
			cliques[node] = n.Labels[level.LabelKey]
		}
	}
	want := domainStatus(cd, claims.Items, cliques)
	if want.Status == computedomain.StatusReady {
		if err := r.releasePods(ctx, cd, claims.Items); err != nil {
			return ctrl.Result{}, err
		}
	}
	if equality.Semantic.DeepEqual(want, cd.Status) {
		return ctrl.Result{}, nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := unstructured.SetNestedField(u.Object, raw, "status"); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Client.Status().Update(ctx, u); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating the status of ComputeDomain %s: %w", req, err)
	}
	klog.FromContext(ctx).V(2).Info("ComputeDomain status", "computeDomain", req, "status", want.Status, "nodes", len(want.Nodes))
	return ctrl.Result{}, nil
}

// releasePods lets the pods that claim a channel of the ready domain cd
// start: NVIDIA's driver holds such a pod in ContainerCreating (its
// NodePrepareResources) until numNodes of the domain's IMEX daemons are
// ready, so a domain sized for more nodes than its gang runs on hangs the
// gang. KWOK starts no pod claiming the channel before it carries
// lockstep.AnnotationSimulatedChannelReady (deploy/kwok/stages.yaml).
func (r *ComputeDomainStandIn) releasePods(ctx context.Context, cd *computedomain.ComputeDomain, claims []resourcev1.ResourceClaim) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, lockstep.AnnotationSimulatedChannelReady))
	for _, ref := range channelHolders(cd.UID, claims) {
		pod := &corev1.Pod{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: cd.Namespace, Name: ref.Name}, pod)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return err
		case pod.UID != ref.UID || pod.Annotations[lockstep.AnnotationSimulatedChannelReady] != "":
			continue
		}
		if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing pod %s/%s to its ComputeDomain's channel: %w", pod.Namespace, pod.Name, err)
		}
	}
	return nil
}

// channelHolders are the pods a channel of domain uid is allocated and
// reserved for.
func channelHolders(uid types.UID, claims []resourcev1.ResourceClaim) []resourcev1.ResourceClaimConsumerReference {
	var refs []resourcev1.ResourceClaimConsumerReference
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil || !slices.Contains(channelDomains(c), uid) {
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" && ref.APIGroup == "" {
				refs = append(refs, ref)
			}
		}
	}
	return refs
}

// ensureTemplate creates the domain's channel claim template.
func (r *ComputeDomainStandIn) ensureTemplate(ctx context.Context, cd *computedomain.ComputeDomain) error {
	tmpl, err := computedomain.ChannelClaimTemplate(cd)
	if err != nil {
		return err
	}
	tmpl.OwnerReferences = []metav1.OwnerReference{{APIVersion: computedomain.GroupVersion.String(), Kind: computedomain.GVK.Kind,
		Name: cd.Name, UID: cd.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(tmpl), &resourcev1.ResourceClaimTemplate{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := r.Client.Create(ctx, tmpl); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", tmpl.Namespace, tmpl.Name, err)
	}
	return nil
}

// channelDomains are the ComputeDomain UIDs a claim's compute-domain
// configuration names (domainID).
func channelDomains(claim *resourcev1.ResourceClaim) []types.UID {
	var uids []types.UID
	for _, c := range claim.Spec.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != computedomain.DriverName {
			continue
		}
		var params struct {
			Kind     string `json:"kind"`
			DomainID string `json:"domainID"`
		}
		if json.Unmarshal(c.Opaque.Parameters.Raw, &params) == nil && params.Kind == computedomain.ChannelConfigKind && params.DomainID != "" {
			uids = append(uids, types.UID(params.DomainID))
		}
	}
	return uids
}

// joinedNodes are the nodes, sorted, where a channel of domain uid is
// allocated and reserved for a pod: where the driver would have prepared
// it and started the node's IMEX daemon.
func joinedNodes(uid types.UID, claims []resourcev1.ResourceClaim) []string {
	var nodes []string
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 || !slices.Contains(channelDomains(c), uid) {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			// The kubelet plugin's pool is named after its node.
			if res.Driver == computedomain.DriverName && !slices.Contains(nodes, res.Pool) {
				nodes = append(nodes, res.Pool)
			}
		}
	}
	slices.Sort(nodes)
	return nodes
}

// domainStatus is the status the driver reports for cd: the joined nodes,
// Ready, numbered within their clique, and Ready overall once numNodes of
// them are (once any is, for numNodes 0). cliques maps a node to its
// clique label.
func domainStatus(cd *computedomain.ComputeDomain, claims []resourcev1.ResourceClaim, cliques map[string]string) computedomain.Status {
	st := computedomain.Status{Status: computedomain.StatusNotReady}
	perClique := map[string]int{}
	for _, n := range joinedNodes(cd.UID, claims) {
		clique := cliques[n]
		st.Nodes = append(st.Nodes, computedomain.Node{Name: n, CliqueID: clique, Index: perClique[clique], Status: computedomain.StatusReady})
		perClique[clique]++
	}
	if len(st.Nodes) > 0 && len(st.Nodes) >= cd.Spec.NumNodes {
		st.Status = computedomain.StatusReady
	}
	return st
}
