package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Every profile preempts through TopologyPlacement alone: the framework
// stops at the first PostFilter that succeeds, and upstream's
// DefaultPreemption, a default multiPoint plugin, would evict gang members
// one at a time. TopologyPlacement embeds it for pods outside gangs. Read
// as kube-scheduler reads --config (decoded, defaulted and validated) once
// the YAML anchor of the alias profile is resolved, as the local cluster
// renders it (localcluster.DeployedSchedulerConfig): the scheduler's
// strict decoder refuses the merge key's overridden schedulerName.
func TestSchedulerConfigPreemptsThroughTopologyPlacement(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if data, err = yaml.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("invalid configuration: %v", err)
	}
	if len(cfg.Profiles) == 0 {
		t.Fatal("no profiles")
	}
	pluginNames := func(ps []config.Plugin) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for _, prof := range cfg.Profiles {
		if diff := cmp.Diff([]string{lockstep.TopologyPlacementPlugin}, pluginNames(prof.Plugins.PostFilter.Enabled)); diff != "" {
			t.Errorf("%s: postFilter plugins (-want,+got):\n%s", prof.SchedulerName, diff)
		}
		if !slices.Contains(pluginNames(prof.Plugins.MultiPoint.Disabled), names.DefaultPreemption) {
			t.Errorf("%s: %s is not disabled: multiPoint disables %v", prof.SchedulerName, names.DefaultPreemption, pluginNames(prof.Plugins.MultiPoint.Disabled))
		}
	}
}
