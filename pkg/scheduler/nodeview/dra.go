package nodeview

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/gpuclaim"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// Source is what the view reads of DRA objects. Every read is served from
// the scheduler's informers, never the API: it runs on the scheduling
// thread.
type Source interface {
	// Claim returns a ResourceClaim as the scheduler's DynamicResources
	// plugin sees it, with the allocations it made and has not written yet.
	Claim(namespace, name string) (*resourcev1.ResourceClaim, error)
	Template(namespace, name string) (*resourcev1.ResourceClaimTemplate, error)
	Slices() ([]*resourcev1.ResourceSlice, error)
	// Allocated are the devices of every allocated claim, in-flight
	// allocations of this scheduler included.
	Allocated() (sets.Set[structured.DeviceID], error)
}

// frameworkDRA reads the framework's shared DRA manager, the one the
// DynamicResources plugin allocates through, and the template informer.
type frameworkDRA struct {
	manager   framework.SharedDRAManager
	templates func(namespace, name string) (*resourcev1.ResourceClaimTemplate, error)
}

// FrameworkDRA returns the handle's DRA objects, or nil when the
// scheduler runs without DRA: claims are then left to whoever serves them.
//
// Templates come from an informer of the plugin's own, started here and
// not waited for: the scheduler waits for every informer of its shared
// factory before it schedules anything, and a scheduler whose role may not
// list templates would schedule nothing. Only gang members whose claim is
// not generated yet are sized from templates (DynamicResources keeps a pod
// out of the queue until its own claims exist); until the informer synced
// they count as asking for no GPU.
func FrameworkDRA(ctx context.Context, handle framework.Handle) Source {
	m := handle.SharedDRAManager()
	if m == nil {
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(handle.ClientSet(), 0,
		informers.WithTransform(cache.TransformFunc(func(obj any) (any, error) {
			if t, ok := obj.(*resourcev1.ResourceClaimTemplate); ok {
				t.ManagedFields = nil
			}
			return obj, nil
		})))
	lister := factory.Resource().V1().ResourceClaimTemplates().Lister()
	factory.Start(ctx.Done())
	return &frameworkDRA{manager: m, templates: func(ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
		return lister.ResourceClaimTemplates(ns).Get(name)
	}}
}

func (f *frameworkDRA) Claim(ns, name string) (*resourcev1.ResourceClaim, error) {
	return f.manager.ResourceClaims().Get(ns, name)
}

func (f *frameworkDRA) Template(ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	return f.templates(ns, name)
}

func (f *frameworkDRA) Slices() ([]*resourcev1.ResourceSlice, error) {
	return f.manager.ResourceSlices().ListWithDeviceTaintRules()
}

func (f *frameworkDRA) Allocated() (sets.Set[structured.DeviceID], error) {
	return f.manager.ResourceClaims().ListAllAllocatedDevices()
}

// claimedGPUs is what a pod asks of the GPU DeviceClass through its claims.
type claimedGPUs struct {
	gpus int
	// oneRoot says the GPUs come from one claim that asks for them from one
	// PCIe root first (gpuclaim.OnePCIeRoot): the allocator's choice is
	// predicted so.
	oneRoot bool
	// problem says why the pod's claims cannot be planned (a shape the
	// planner cannot predict); unresolvable says whether only the user can
	// fix it, as opposed to a claim or template not in the cache yet.
	problem      string
	unresolvable bool
	// channels counts the ComputeDomain channels the pod's own claims
	// (made from templates, one per pod) ask for: each takes one of its
	// node's. A claim shared by name is left to DynamicResources.
	channels int
}

// claimedGPUsOf reads the GPUs a pod's claims ask for: each pod claim's
// ResourceClaim (by name, or the one generated for it from its template,
// as pod.status.resourceClaimStatuses names it), or the template itself
// before the claim exists. Requests of other device classes (a
// ComputeDomain's channel) are not GPUs and are left to DynamicResources.
func claimedGPUsOf(dra Source, pod *v1.Pod) claimedGPUs {
	var out claimedGPUs
	gpuClaims := 0
	for _, pc := range pod.Spec.ResourceClaims {
		spec, err := podClaimSpec(dra, pod, pc)
		if err != nil {
			return claimedGPUs{problem: fmt.Sprintf("pod claim %q: %v", pc.Name, err), unresolvable: !apierrors.IsNotFound(err)}
		}
		if spec == nil {
			continue
		}
		if pc.ResourceClaimTemplateName != nil {
			out.channels += computedomain.ChannelRequests(spec)
		}
		n, problem := gpuclaim.Count(spec)
		if problem != "" {
			return claimedGPUs{problem: fmt.Sprintf("pod claim %q: %s", pc.Name, problem), unresolvable: true}
		}
		if n > 0 {
			gpuClaims++
			out.oneRoot = gpuclaim.OnePCIeRoot(spec)
		}
		out.gpus += n
	}
	out.oneRoot = out.oneRoot && gpuClaims == 1
	return out
}

// podClaimSpec returns the spec of a pod claim, nil when none is needed
// (its template generated no claim). A template's claim that does not
// exist yet, or any more (a deleted pod's, which the claim controller
// deletes), is read as its template.
func podClaimSpec(dra Source, pod *v1.Pod, pc v1.PodResourceClaim) (*resourcev1.ResourceClaimSpec, error) {
	name := pc.ResourceClaimName
	if pc.ResourceClaimTemplateName != nil {
		name = nil
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name != pc.Name {
				continue
			}
			if st.ResourceClaimName == nil {
				return nil, nil
			}
			name = st.ResourceClaimName
		}
		if name != nil {
			if c, err := dra.Claim(pod.Namespace, *name); err == nil {
				return &c.Spec, nil
			} else if !apierrors.IsNotFound(err) {
				return nil, err
			}
		}
		t, err := dra.Template(pod.Namespace, *pc.ResourceClaimTemplateName)
		if err != nil {
			return nil, err
		}
		return &t.Spec.Spec, nil
	}
	if name == nil {
		return nil, fmt.Errorf("names neither a claim nor a template")
	}
	c, err := dra.Claim(pod.Namespace, *name)
	if err != nil {
		return nil, err
	}
	return &c.Spec, nil
}

// ServedByDRA reports whether a node's GPUs are a DRA driver's: it
// advertises no nvidia.com/gpu. Only such nodes are planned for pods that
// claim GPUs, and only the others for pods that request nvidia.com/gpu.
func ServedByDRA(ni fwk.NodeInfo) bool {
	return ni.GetAllocatable().GetScalarResources()[lockstep.GPUResource] == 0
}

// draView is what one plan reads of the DRA driver's GPUs: per node, the
// NodeTopology indexes of the GPUs whose devices are published and not
// allocated to any claim, and the order the allocator meets them in.
type draView struct {
	devices *deviceView
	// taken, when not nil, are the devices the claim tracker has allocated,
	// by pool, read for this plan in place of the claims the view follows
	// (deviceView.needsTracker).
	taken map[string][]string
	// oneRoot says the planned pod's claim asks for one PCIe root first.
	oneRoot bool
}

// nodeJoin is a node's devices joined to its GPUs.
type nodeJoin struct {
	uuids []string
	// gpus maps joined device names to GPU indexes; all are those GPUs.
	gpus     map[string]int
	all      topology.GPUSet
	unjoined []topology.UnjoinedDevice
	// order is the joined GPUs in device order, for predicting the
	// allocator's choice.
	order *topology.DRAOrder
}

// draSnapshot returns the DRA view of a plan: the plugin's deviceView,
// with the claim tracker's allocated devices while DynamicResources has
// allocations in flight that the view has not seen. Without a deviceView
// (FollowDevices not called) it is built from the Source's objects for the plan. Devices
// that join no GPU are not planned on; they are logged when their node is
// joined, and counted.
func (v *View) draSnapshot() (*draView, error) {
	view := &draView{devices: v.devices}
	switch {
	case view.devices == nil:
		all, allocated, err := v.draState()
		if err != nil {
			return nil, err
		}
		view.devices = rebuiltDeviceView(v.logger, all, nil, v.specs.uuidsOf)
		view.taken = takenByPool(allocated)
	case view.devices.needsTracker():
		allocated, err := v.dra.Allocated()
		if err != nil {
			return nil, fmt.Errorf("listing allocated devices: %w", err)
		}
		view.taken = takenByPool(allocated)
	}
	done := view.devices.read()
	unjoined := view.devices.unjoined
	done()
	v.unjoined.Set(float64(unjoined))
	return view, nil
}

// draState reads every ResourceSlice and the devices allocated to claims,
// in-flight allocations included, once for a plan.
func (v *View) draState() ([]*resourcev1.ResourceSlice, sets.Set[structured.DeviceID], error) {
	all, err := v.dra.Slices()
	if err != nil {
		return nil, nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	allocated, err := v.dra.Allocated()
	if err != nil {
		return nil, nil, fmt.Errorf("listing allocated devices: %w", err)
	}
	return all, allocated, nil
}

// joinNode joins the devices of a node's slices to its GPUs (uuids by
// NodeTopology index), and records the joined GPUs in the order the
// allocator walks the devices: slice by slice as listed (the
// DynamicResources plugin lists them from the same informer), device by
// device.
func joinNode(from []*resourcev1.ResourceSlice, uuids []string) *nodeJoin {
	var devices []topology.DRADevice
	var roots []string
	for _, s := range from {
		for _, d := range s.Spec.Devices {
			dev := topology.DRADevice{Driver: s.Spec.Driver, Name: d.Name}
			if a, ok := d.Attributes[lockstep.DRAUUIDAttribute]; ok && a.StringValue != nil {
				dev.UUID = *a.StringValue
			}
			root := ""
			if a, ok := d.Attributes[lockstep.DRAPCIeRootAttribute]; ok && a.StringValue != nil {
				root = *a.StringValue
			}
			devices = append(devices, dev)
			roots = append(roots, root)
		}
	}
	node := &topology.NodeTopology{GPUs: make([]topology.GPU, len(uuids))}
	for i, u := range uuids {
		node.GPUs[i].UUID = u
	}
	join := topology.JoinDRADevices(node, lockstep.DRAGPUDriver, devices)
	out := &nodeJoin{uuids: uuids, gpus: join.GPUs, unjoined: join.Unjoined}
	for name, gpu := range join.GPUs {
		if gpu >= topology.MaxGPUs {
			delete(out.gpus, name)
			continue
		}
		out.all |= topology.NewGPUSet(gpu)
	}
	var order []int
	var orderRoots []string
	var seen topology.GPUSet
	for i, d := range devices {
		if gpu, ok := out.gpus[d.Name]; ok && !seen.Has(gpu) {
			seen |= topology.NewGPUSet(gpu)
			order = append(order, gpu)
			orderRoots = append(orderRoots, roots[i])
		}
	}
	out.order = topology.NewDRAOrder(order, orderRoots)
	return out
}

// sameSlice reports whether a and b are the same slice, not merely equal.
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// draNode gives a planner node of a pod that claims GPUs its free GPUs:
// on a node whose GPUs a DRA driver serves, the published devices no claim
// holds, that the agent reports healthy and free, and that no plan or
// reserved pod holds; none elsewhere. ownOpen is plannerNode's: only a
// gang with open slots reads the books per node, the others what the row
// keeps of them. The caller holds the GPU index for reading, the books
// (core) and the rows, after plannerNode and plans.
//
// Its members get the devices the allocator will give their claims
// (placement.Node.DRA), not the NVLink-best set: the allocator does not
// read the plan, so books, the lockstep.dev/gpus annotation and the rating
// hold what the pods get only when the plan predicts it.
func draNode(core *placement.Books, pn *placement.Node, row *snapshotRow, gang string, ownOpen bool, view *draView) {
	pool := row.dra
	free := pool.free
	if view.taken != nil {
		free = freeExcept(pool.join, view.taken[row.name])
	}
	// The claims (free) hold what pods hold, in-flight allocations
	// included; the books add the plans' open slots. Their record of
	// reserved pods is a prediction the allocator need not have followed.
	except := ""
	if ownOpen {
		except = gang
	}
	pn.FreeGPUs = free & row.gpus.free &^ core.OpenHeldOn(pn.Name, except)
	pn.DRA, pn.DRAOneRoot = pool.join.order, view.oneRoot
}

// plans reports whether a plan for a pod that claims GPUs considers the
// node at all: one whose GPUs a DRA driver serves (ServedByDRA: the row's
// nvidia.com/gpu count is its allocatable one), with a NodeTopology.
// Other nodes are left out of the snapshot, not given no free GPUs: the
// planner would count their GPUs in a domain's size, and a gang that does
// not fit could drain a leaf of device-plugin nodes it can never use.
//
// It keeps the node's pool in row (row.dra) while the view's pools stay
// the same, for draNode. The caller holds v.devices for reading.
func (v *draView) plans(row *snapshotRow) bool {
	if row.draOf != v.devices || row.draEpoch != v.devices.epoch {
		row.dra, row.draOf, row.draEpoch = v.devices.pools[row.name], v.devices, v.devices.epoch
	}
	return row.dra != nil && row.gpus != nil && row.gpuCount == 0
}

// ClaimedFree is a DRA node's free GPU count for a plan's validity: the
// GPUs whose devices no claim holds (the DRA view, as plans read it, with
// DynamicResources' in-flight allocations), that the agent reports
// healthy and free, less the open slots of other plans. Reserved pods
// count by their claims, not by the books: a member reserved into a slot
// whose prediction the allocator did not follow (slots go by rank) would
// otherwise count twice, and its own gang's plan be dropped as not
// fitting. The agent's
// report alone is not enough: a kubelet that does not serve
// DynamicResources reports no DRA allocation, and one that does reports
// it on its next read, so a plan whose slots another claim took would
// survive until planTTL.
func (v *View) ClaimedFree(node, gang string) int {
	gpus, ok := v.gpus.get(node)
	if !ok {
		return 0
	}
	unclaimed, ok := v.unclaimedGPUs(node)
	if !ok {
		return (gpus.free &^ v.heldOn(node, gang)).Len()
	}
	// As draNode: the claims say what pods hold; the books add open slots.
	core := v.held.LockCore()
	open := core.OpenHeldOn(node, gang)
	v.held.UnlockCore()
	return (gpus.free & unclaimed &^ open).Len()
}

// draViewFor returns the DRA view a plan for a pod asking req reads, nil
// for a pod that claims no GPUs.
func (v *View) draViewFor(req Request) (*draView, error) {
	if v.dra == nil || !req.Claimed {
		return nil, nil
	}
	view, err := v.draSnapshot()
	if err != nil {
		return nil, err
	}
	view.oneRoot = req.OneRoot
	return view, nil
}

// keepUUIDs remembers a node's GPU UUIDs before slim drops them. A spec
// without UUIDs (one slimmed already, as the informer's list is before its
// transform runs again) keeps what was remembered.
func (t *specTable) keepUUIDs(node string, gpus []v1alpha1.GPU) {
	uuids := make([]string, len(gpus))
	known := false
	for i, g := range gpus {
		uuids[i] = g.UUID
		known = known || g.UUID != ""
	}
	if !known {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.uuids == nil {
		t.uuids = map[string][]string{}
	}
	t.uuids[node] = uuids
	if t.onUUIDs != nil {
		t.onUUIDs(node, uuids)
	}
}

// watchUUIDs has fn called with every node's UUIDs kept now and whenever
// they change, nil once they are forgotten. fn is called with t locked,
// so in the order the changes happen; it must not call t.
func (t *specTable) watchUUIDs(fn func(node string, uuids []string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onUUIDs = fn
	for node, uuids := range t.uuids {
		fn(node, uuids)
	}
}

// uuidsOf returns a node's GPU UUIDs by index; nil for a nil table.
func (t *specTable) uuidsOf(node string) []string {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.uuids[node]
}

// forgetUUIDs drops a node's UUIDs once its NodeTopology is deleted.
func (t *specTable) forgetUUIDs(node string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.uuids, node)
	if t.onUUIDs != nil {
		t.onUUIDs(node, nil)
	}
}

// nodeChannels are a node's ComputeDomain channels for a plan
// (placement.Node.Channels and FreeChannels).
type nodeChannels struct{ all, free int }

// channelsFor reads, for a plan of a pod asking req, each node's
// ComputeDomain channels: those the compute-domain driver's node-local
// pool publishes in its newest generation, and those of them no claim
// holds (in-flight allocations of this scheduler included). nil for a pod
// that claims no channel, or a scheduler without DRA, whose plans do not
// count channels.
//
// NVIDIA's driver serves one domain per node, through one channel each
// pod of the domain claims for itself: without counting them the planner
// put two members on one tray, or a member beside another domain's pod,
// and DynamicResources turned the gang away there on every retry.
func (v *View) channelsFor(req Request) (map[string]nodeChannels, error) {
	if v.dra == nil || !req.Channels {
		return nil, nil
	}
	all, allocated, err := v.draState()
	if err != nil {
		return nil, err
	}
	newest := map[string]int64{}
	for _, s := range all {
		if s.Spec.Driver == computedomain.DriverName && s.Spec.NodeName != nil {
			if gen, ok := newest[s.Spec.Pool.Name]; !ok || s.Spec.Pool.Generation > gen {
				newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
			}
		}
	}
	out := make(map[string]nodeChannels, len(newest))
	for _, s := range all {
		if s.Spec.Driver != computedomain.DriverName || s.Spec.NodeName == nil || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		c := out[*s.Spec.NodeName]
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if !computedomain.IsChannel(s.Spec.Driver, d) {
				continue
			}
			c.all++
			if !allocated.Has(structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)) {
				c.free++
			}
		}
		out[*s.Spec.NodeName] = c
	}
	return out, nil
}

// channelNode gives a planner node its channels for a plan of gang: none
// free where another gang's plan books GPUs (others), since that plan's
// members may claim the node's channel before this one's do; the plan
// does not say whether they will.
func channelNode(pn *placement.Node, c nodeChannels, others topology.GPUSet) {
	pn.Channels, pn.FreeChannels = c.all, c.free
	if others != 0 {
		pn.FreeChannels = 0
	}
}

// ChannelsHeld counts the ComputeDomain channels pod's claims hold on
// node, for preemption: evicting it frees them.
func (v *View) ChannelsHeld(pod *v1.Pod, node string) int {
	if v.dra == nil {
		return 0
	}
	n := 0
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		claim, err := v.dra.Claim(pod.Namespace, *st.ResourceClaimName)
		if err != nil || claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Pool == node && computedomain.IsChannelDevice(r.Driver, r.Device) {
				n++
			}
		}
	}
	return n
}

// GPUsHeld returns the GPUs of node whose devices pod's claims hold, for
// preemption: evicting the pod frees them. A claim made from the pod's
// template goes with the pod (the claim controller deletes it); a claim
// the pod names is deallocated only once no pod is reserved for it, so
// one that another pod is reserved for too frees nothing and is left
// out, even where that pod is evicted with this one: the planner must
// never count on devices an eviction may not free.
func (v *View) GPUsHeld(pod *v1.Pod, node string) topology.GPUSet {
	if v.dra == nil || len(pod.Spec.ResourceClaims) == 0 {
		return 0
	}
	var devices []string
	for _, name := range podClaimNames(pod) {
		claim, err := v.dra.Claim(pod.Namespace, name)
		if err != nil || claim.Status.Allocation == nil || reservedForOthers(claim, pod.UID) {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			// As OnClaim: admin access takes no device.
			if r.Driver == lockstep.DRAGPUDriver && r.Pool == node && !ptr.Deref(r.AdminAccess, false) {
				devices = append(devices, r.Device)
			}
		}
	}
	if len(devices) == 0 {
		return 0
	}
	join := v.joinOf(node)
	if join == nil {
		return 0
	}
	var held topology.GPUSet
	for _, d := range devices {
		if gpu, ok := join.gpus[d]; ok {
			held |= topology.NewGPUSet(gpu)
		}
	}
	return held
}

// reservedForOthers reports whether a pod other than uid is reserved for
// claim.
func reservedForOthers(claim *resourcev1.ResourceClaim, uid types.UID) bool {
	for _, r := range claim.Status.ReservedFor {
		if r.UID != uid {
			return true
		}
	}
	return false
}

// joinOf returns node's devices joined to its GPUs, nil when its pool is
// not published or its GPUs are not known: from the devices the view
// follows, or, without FollowDevices, joined anew from the Source's
// slices (preemption only, which is rare).
func (v *View) joinOf(node string) *nodeJoin {
	devices := v.devices
	if devices == nil {
		all, err := v.dra.Slices()
		if err != nil {
			return nil
		}
		devices = rebuiltDeviceView(v.logger, all, nil, v.specs.uuidsOf)
	}
	done := devices.read()
	defer done()
	if pool := devices.pools[node]; pool != nil {
		return pool.join
	}
	return nil
}
