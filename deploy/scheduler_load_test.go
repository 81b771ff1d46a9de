package deploy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// The file the ConfigMap is generated from loads in kube-scheduler itself,
// as the deployed scheduler reads it (its strict decoder refuses what a
// lenient YAML reader accepts, such as a key set again after a merge), and
// both profiles get the same plugins and args.
func TestSchedulerConfigLoadsInKubeScheduler(t *testing.T) {
	cfg, err := options.LoadConfigFromFile(klog.Background(), "scheduler/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 2 {
		t.Fatalf("%d profiles, want 2", len(cfg.Profiles))
	}
	byName := map[string]schedulerconfig.KubeSchedulerProfile{}
	for _, p := range cfg.Profiles {
		byName[p.SchedulerName] = p
	}
	main, alias := byName[lockstep.SchedulerName], byName[lockstep.SchedulerPluginsSchedulerName]
	if main.Plugins == nil || alias.Plugins == nil {
		t.Fatalf("profiles %v: want %s and %s", byName, lockstep.SchedulerName, lockstep.SchedulerPluginsSchedulerName)
	}
	if diff := cmp.Diff(main.Plugins, alias.Plugins); diff != "" {
		t.Errorf("plugins differ (-%s,+%s):\n%s", lockstep.SchedulerName, lockstep.SchedulerPluginsSchedulerName, diff)
	}
	if diff := cmp.Diff(main.PluginConfig, alias.PluginConfig); diff != "" {
		t.Errorf("plugin args differ (-%s,+%s):\n%s", lockstep.SchedulerName, lockstep.SchedulerPluginsSchedulerName, diff)
	}
}
