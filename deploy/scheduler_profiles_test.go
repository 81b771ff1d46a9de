package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// The scheduler serves scheduler-plugins' default second-scheduler name as
// an alias of lockstep-scheduler: the same plugins and args under another
// schedulerName, so pods of operators that hard-code it (KubeRay) are placed
// as Lockstep's own.
func TestSchedulerConfigServesAliasProfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Profiles []map[string]any `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	rest := make([]map[string]any, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		name, _ := p["schedulerName"].(string)
		names = append(names, name)
		rest[i] = map[string]any{}
		for k, v := range p {
			if k != "schedulerName" {
				rest[i][k] = v
			}
		}
	}
	if diff := cmp.Diff([]string{lockstep.SchedulerName, lockstep.SchedulerPluginsSchedulerName}, names); diff != "" {
		t.Fatalf("profiles (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(rest[0], rest[1]); diff != "" {
		t.Errorf("%s's profile differs from %s's beyond its name (-%s,+%s):\n%s",
			lockstep.SchedulerPluginsSchedulerName, lockstep.SchedulerName, lockstep.SchedulerName, lockstep.SchedulerPluginsSchedulerName, diff)
	}
}
