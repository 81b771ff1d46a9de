package coscheduling

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/podgroupindex"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
)

// PreFilter turns the pod away, UnschedulableAndUnresolvable so that
// nothing is preempted for it, while its PodGroup is backed off after a
// failure, has fewer than minMember pods, or more gated pods than it can
// spare, or (upstream's minResources check) asks for more than the whole
// cluster has free.
//
// The minResources check is the manager's (core.Manager.PreFilter): a sum
// of every node's free capacity, net of the gang's own pods, read node by
// node until the PodGroup's minResources are covered. For a pod that
// TopologyPlacement plans (topologyplacement.Plans: a gang member asking for
// nvidia.com/gpu) in this profile, the sum is redundant: TopologyPlacement's
// PreFilter, in the same cycle, places every member of the pod's plan on
// the nodes' free GPUs, CPU and memory at once, and turns the gang away when
// they do not fit, holding nothing; a sum that fits says less than that, and
// one that does not is a plan that does not either. The sum is what cost:
// each node read is a deep copy of its NodeInfo, and on a cluster filling up
// a gang's check read more than half of its nodes (docs/benchmarks.md). So
// those pods get the manager's other checks (quorum, gates) but not the
// sum. It stays for the pods the planner does not see: members that ask
// for no GPUs (a parameter server, a PodGroup of CPU pods) and members
// that ask for GPUs through ResourceClaims, which Plans cannot tell.
//
// A PodGroup of one member is let through: its checks come down to the
// pod itself as the quorum and minResources, which Filter (NodeResourcesFit,
// TopologyPlacement) checks node by node, more strictly, for the one pod;
// a cluster of many single-pod jobs (each with a PodGroup, as the
// TrainingJob controller writes them) paid the sum once per job. Backoff of
// such a group is the queue's own pod backoff.
func (c *Coscheduling) PreFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*framework.PreFilterResult, *fwk.Status) {
	pgName, pg := c.mgr.GetPodGroup(ctx, pod)
	if pg == nil || pg.Spec.MinMember <= 1 {
		return nil, nil
	}
	var err error
	switch {
	case c.backoff != nil && c.backoff.active(pgName):
		err = fmt.Errorf("podGroup %v failed recently", pgName)
	case pg.Spec.MinResources == nil || c.planner.plans(pod):
		err = c.quorum(pod, pg)
	default:
		err = c.mgr.PreFilter(ctx, pod)
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("PreFilter rejects the pod", "plugin", Name, "pod", klog.KObj(pod), "podGroup", klog.KObj(pg), "reason", err)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	return nil, nil
}

// quorum is the manager's PreFilter but for backoff and minResources: the
// PodGroup has at least minMember pods, and no more of them gated than
// those beyond minMember.
func (c *Coscheduling) quorum(pod *v1.Pod, pg *v1alpha1.PodGroup) error {
	members, err := podgroupindex.Members(c.pods, pod.Namespace, pg.Name)
	if err != nil {
		return fmt.Errorf("podLister list pods failed: %w", err)
	}
	gap := int(pg.Spec.MinMember) - len(members)
	if gap > 0 {
		return fmt.Errorf("pre-filter pod %v cannot find enough sibling pods, "+
			"current pods number: %v, minMember of group: %v", pod.Name, len(members), pg.Spec.MinMember)
	}
	for _, m := range members {
		if len(m.Spec.SchedulingGates) > 0 {
			gap++
		}
		if gap > 0 {
			return fmt.Errorf("pre-filter pod %v cannot proceed due to gated pods in the same PodGroup", pod.Name)
		}
	}
	return nil
}

// planner says whether TopologyPlacement plans a pod in this plugin's
// profile: only then is its whole-gang check there to stand in for the
// minResources sum. The profile's plugins are known once every plugin is
// built, so it asks at the first PreFilter.
type planner struct {
	handle  framework.Handle
	once    sync.Once
	enabled bool
}

// pluginLister is the part of framework.Framework, the handle kube-scheduler
// gives each plugin, that lists the profile's plugins.
type pluginLister interface {
	ListPlugins() *schedconfig.Plugins
}

func (p *planner) plans(pod *v1.Pod) bool {
	p.once.Do(func() {
		l, ok := p.handle.(pluginLister)
		if !ok {
			return
		}
		if plugins := l.ListPlugins(); plugins != nil {
			p.enabled = slices.ContainsFunc(plugins.PreFilter.Enabled, func(pl schedconfig.Plugin) bool {
				return pl.Name == topologyplacement.Name
			})
		}
	})
	return p.enabled && topologyplacement.Plans(pod)
}

// backoff keeps the PodGroups that failed recently (PostFilter), each until
// its backoff ends. The manager has one too, but says only through its
// PreFilter whether a gang is in it, and PreFilter does not always call
// that; so this one is the only one used.
type backoff struct {
	d   time.Duration
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

func newBackoff(d time.Duration, now func() time.Time) *backoff {
	return &backoff{d: d, now: now, until: map[string]time.Time{}}
}

// add backs gang off, unless it is backed off already: as upstream's, a
// failure during the backoff does not extend it. Ended backoffs are
// dropped.
func (b *backoff) add(gang string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for g, end := range b.until {
		if !now.Before(end) {
			delete(b.until, g)
		}
	}
	if _, ok := b.until[gang]; !ok {
		b.until[gang] = now.Add(b.d)
	}
}

// active reports whether gang is backed off.
func (b *backoff) active(gang string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	end, ok := b.until[gang]
	return ok && b.now().Before(end)
}
