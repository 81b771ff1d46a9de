package topologyplacement

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
)

// PreBindPreFlight says whether PreBind may have work: only for gang
// members, of which the first past Permit records the placement.
func (p *TopologyPlacement) PreBindPreFlight(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if a, ok := p.gangs.Books.AssignmentOf(pod.UID); !ok || a.Gang == "" {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// PreBind records the achieved placement on the PodGroup, once per gang.
func (p *TopologyPlacement) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	a, ok := p.gangs.Books.AssignmentOf(pod.UID)
	if !ok || a.Gang == "" {
		return nil
	}
	// Past Permit: from here the member only waits for the apiserver.
	p.binds.started(pod.UID)
	if g, first := p.gangs.Books.MarkPublished(a.Gang); first {
		// The first member past Permit: the whole gang is reserved.
		p.observePlaced(a.Gang, g)
		if err := p.publishPlacement(ctx, pod, g); err != nil {
			// The placement record is informational; binding goes on.
			klog.FromContext(ctx).Error(err, "Recording the placement on the PodGroup failed", "plugin", Name, "podGroup", a.Gang)
		}
	}
	return nil
}

// Bind binds a pod the plugin chose GPUs for, carrying its GPU indices and
// the gang's domain as annotations of the Binding: the apiserver sets them
// on the pod together with its node, so whoever allocates the devices never
// sees the pod bound without its GPUs, and binding costs one write, as it
// does for DefaultBinder. Other pods are skipped, for DefaultBinder.
func (p *TopologyPlacement) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	// Whatever the way out, including to DefaultBinder, the count PreBind
	// may have started ends.
	defer p.binds.done(pod.UID)
	// DynamicResources' PreBind has written the pod's allocations: its
	// GPUs are what they hold, not what the plan predicted, in the books
	// and in the annotation.
	p.followClaims(pod)
	a, ok := p.gangs.Books.AssignmentOf(pod.UID)
	if !ok {
		if s, err := stateOf(state); err == nil && s.plan != nil {
			// Reserved through a plan that was dropped since (another
			// member's bind failed): binding it now, by DefaultBinder,
			// would give it no GPUs. Fail, so it is retried with a new plan.
			return fwk.NewStatus(fwk.Error, fmt.Sprintf("PodGroup %s's plan was dropped before %s/%s was bound; retrying it", s.gang, pod.Namespace, pod.Name))
		}
		return fwk.NewStatus(fwk.Skip)
	}
	annotations := map[string]string{lockstep.AnnotationGPUs: a.GPUs.List()}
	if g, planned := p.gangs.Books.Get(a.Gang); planned && a.Gang != "" {
		annotations[lockstep.AnnotationDomain] = g.Plan().Domain.DisplayID()
	}
	if a.Gang != "" {
		annotations[lockstep.AnnotationRank] = bindRank(pod, a)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: annotations},
		Target:     v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	p.binds.started(pod.UID)
	klog.FromContext(ctx).V(3).Info("Binding pod with its GPUs", "plugin", Name, "pod", klog.KObj(pod), "node", nodeName, "gpus", annotations[lockstep.AnnotationGPUs])
	if err := p.bind(ctx, binding); err != nil {
		if p.boundTo(ctx, pod, nodeName) {
			// The apiserver bound it and only the answer was lost (a 5xx
			// from a proxy, a timeout): failing now would make Unreserve
			// forget GPUs the pod holds, for another pod to be given.
			klog.FromContext(ctx).V(2).Info("Binding answered with an error but took effect", "plugin", Name, "pod", klog.KObj(pod), "node", nodeName, "err", err)
			return nil
		}
		return fwk.AsStatus(fmt.Errorf("binding pod %s/%s to %s with GPUs %s: %w", pod.Namespace, pod.Name, nodeName, annotations[lockstep.AnnotationGPUs], err))
	}
	return nil
}

// bindRank is the lockstep.dev/rank a gang member is bound with: the rank
// it carries, so the annotation never disagrees with the environment its
// controller wrote, or else its slot's place in the plan's topology order,
// for pods whose operator assigns no rank through Lockstep.
func bindRank(pod *v1.Pod, a assignment) string {
	if r, ok := gangmanager.RankOf(pod); ok {
		return strconv.Itoa(r)
	}
	return strconv.Itoa(a.Slot)
}

// boundTo reads the pod from the apiserver (not the informer, which may lag)
// and says whether it is this pod, bound to node.
func (p *TopologyPlacement) boundTo(ctx context.Context, pod *v1.Pod, node string) bool {
	got, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	return err == nil && got.UID == pod.UID && got.Spec.NodeName == node
}

// bind sends the Binding the way DefaultBinder does: through the
// scheduler's API cacher when asynchronous API calls are on, so it is
// ordered with the scheduler's other writes for the pod (the cacher's
// dispatcher bounds its calls in flight), else directly, at most
// MaxBindRequests at once.
func (p *TopologyPlacement) bind(ctx context.Context, binding *v1.Binding) error {
	if cacher := p.handle.APICacher(); cacher != nil {
		onFinish, err := cacher.BindPod(binding)
		if err != nil {
			return err
		}
		return cacher.WaitOnFinish(ctx, onFinish)
	}
	send := func() error {
		return p.handle.ClientSet().CoreV1().Pods(binding.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	}
	return p.binds.send(ctx, send)
}

// observePlaced records how long the gang waited since its first attempt and
// how good its placement is, and forgets the first attempt.
func (p *TopologyPlacement) observePlaced(key string, g *gangPlan) {
	now := p.clock.Now()
	p.metrics.gangWait.Observe(now.Sub(p.gangs.FirstSeen(key, now)).Seconds())
	p.gangs.ForgetFirstSeen(key)
	p.metrics.placementEfficiency.WithLabelValues(g.Plan().LevelName).Observe(g.Plan().Efficiency)
}

// publishPlacement records where the gang landed on its PodGroup.
func (p *TopologyPlacement) publishPlacement(ctx context.Context, pod *v1.Pod, g *gangPlan) error {
	pg := &schedv1alpha1.PodGroup{}
	pg.Namespace, pg.Name = pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel]
	// A plan that could not be rated clears an earlier efficiency.
	var efficiency any
	if e := lockstep.FormatEfficiency(g.Plan().Efficiency); e != "" {
		efficiency = e
	}
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		lockstep.AnnotationPlacementDomain:     g.Plan().Domain.DisplayID(),
		lockstep.AnnotationPlacementLevel:      g.Plan().LevelName,
		lockstep.AnnotationPlacementEfficiency: efficiency,
		lockstep.AnnotationPlacementReason:     g.Plan().Explanation,
	}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return p.client.Patch(ctx, pg, client.RawPatch(types.MergePatchType, data))
}
