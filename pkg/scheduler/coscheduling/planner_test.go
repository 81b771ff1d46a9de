package coscheduling

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"
	"sigs.k8s.io/scheduler-plugins/apis/config"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// stubPlanner stands in for TopologyPlacement at PreFilter.
type stubPlanner struct{}

func (stubPlanner) Name() string { return topologyplacement.Name }
func (stubPlanner) PreFilter(context.Context, fwk.CycleState, *v1.Pod, []fwk.NodeInfo) (*framework.PreFilterResult, *fwk.Status) {
	return nil, nil
}
func (stubPlanner) PreFilterExtensions() framework.PreFilterExtensions { return nil }

// TestPlannerInProfile: in a framework kube-scheduler builds, the plugin
// sees whether its profile runs TopologyPlacement at PreFilter, and takes a
// pod for planned only then, and only a gang member that asks for
// nvidia.com/gpu.
func TestPlannerInProfile(t *testing.T) {
	pods := map[string]*v1.Pod{
		"gpu member": utiltesting.MakePod("g-0", "ns").GPUs(2).PodGroup("g").Obj(),
		"cpu member": utiltesting.MakePod("ps-0", "ns").PodGroup("g").Obj(),
		"gpu loose":  utiltesting.MakePod("loose", "ns").GPUs(2).Obj(),
	}
	// The framework counts plugin calls in the scheduler's metrics.
	schedmetrics.Register()
	for _, tc := range []struct {
		name    string
		planner bool
		want    map[string]bool
	}{
		{"with TopologyPlacement", true, map[string]bool{"gpu member": true, "cpu member": false, "gpu loose": false}},
		{"without", false, map[string]bool{"gpu member": false, "cpu member": false, "gpu loose": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var plugin *Coscheduling
			factory := func(_ context.Context, _ runtime.Object, h framework.Handle) (framework.Plugin, error) {
				plugin = newPlugin(h, &config.CoschedulingArgs{PermitWaitingTimeSeconds: 30}, h.SharedInformerFactory().Core().V1().Pods())
				return plugin, nil
			}
			registry := []tf.RegisterPluginFunc{
				tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
				tf.RegisterPreFilterPlugin(Name, factory),
				tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
			}
			if tc.planner {
				registry = append(registry, tf.RegisterPreFilterPlugin(topologyplacement.Name, func(context.Context, runtime.Object, framework.Handle) (framework.Plugin, error) {
					return stubPlanner{}, nil
				}))
			}
			clientset := clientsetfake.NewClientset()
			_, err := tf.NewFramework(ctx, registry, "",
				frameworkruntime.WithClientSet(clientset),
				frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(clientset, 0)))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for name, pod := range pods {
				got[name] = plugin.planner.plans(pod)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("planned (-want,+got):\n%s", diff)
			}
		})
	}
}
