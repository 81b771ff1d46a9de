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

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// PreBindPreFlight says whether PreBind has work: only for plan members.
func (p *TopologyPlacement) PreBindPreFlight(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if _, ok := p.books.assignmentOf(pod.UID); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// PreBind writes the member's GPU indices and the gang's domain on the pod,
// where the device plugin (or the fake agent) reads them, and the achieved
// placement on the PodGroup once per gang.
func (p *TopologyPlacement) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	a, ok := p.books.assignmentOf(pod.UID)
	if !ok {
		return nil
	}
	annotations := map[string]string{v1alpha1.GPUsAnnotation: a.gpus.List()}
	if g, planned := p.books.get(a.gang); planned && a.gang != "" {
		annotations[DomainAnnotation] = domainName(g.plan)
	}
	patch := map[string]any{"metadata": map[string]any{"annotations": annotations}}
	data, err := json.Marshal(patch)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if _, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("annotating pod %s/%s with its GPUs: %w", pod.Namespace, pod.Name, err))
	}
	if a.gang == "" {
		return nil
	}
	if g, first := p.books.markPublished(a.gang); first {
		// The first member past Permit: the whole gang is reserved.
		p.observePlaced(a.gang, g)
		if err := p.publishPlacement(ctx, pod, g); err != nil {
			// The placement record is informational; binding goes on.
			klog.FromContext(ctx).Error(err, "Recording the placement on the PodGroup failed", "plugin", Name, "podGroup", a.gang)
		}
	}
	return nil
}

// observePlaced records how long the gang waited since its first attempt and
// how good its placement is, and forgets the first attempt.
func (p *TopologyPlacement) observePlaced(key string, g *gangPlan) {
	now := p.clock.Now()
	p.metrics.gangWait.Observe(now.Sub(p.firstSeen.firstSeen(key, now)).Seconds())
	p.firstSeen.forget(key)
	p.metrics.placementEfficiency.WithLabelValues(g.plan.LevelName).Observe(g.plan.Efficiency)
}

// publishPlacement records where the gang landed on its PodGroup.
func (p *TopologyPlacement) publishPlacement(ctx context.Context, pod *v1.Pod, g *gangPlan) error {
	pg := &schedv1alpha1.PodGroup{}
	pg.Namespace, pg.Name = pod.Namespace, pod.Labels[schedv1alpha1.PodGroupLabel]
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		PlacementDomainAnnotation:     domainName(g.plan),
		PlacementLevelAnnotation:      g.plan.LevelName,
		PlacementEfficiencyAnnotation: strconv.FormatFloat(g.plan.Efficiency, 'f', 3, 64),
	}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return p.client.Patch(ctx, pg, client.RawPatch(types.MergePatchType, data))
}

// domainName names a plan's domain as level=value, e.g. leaf=leaf-3.
func domainName(plan *placement.Plan) string {
	if plan.Domain == nil || plan.LevelName == topology.ClusterLevel {
		return topology.ClusterLevel
	}
	return plan.LevelName + "=" + plan.Domain.Value
}
