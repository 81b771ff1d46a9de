// Command scheduler is kube-scheduler v1.34 with Lockstep's out-of-tree
// plugins registered. It runs as a secondary scheduler; profiles come from the
// KubeSchedulerConfiguration passed with --config (deploy/scheduler).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Registers CoschedulingArgs with the scheduler's config scheme so the
	// plugin's args decode from --config.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"

	// Coscheduling as scheduler-plugins builds it, plus the bindings of a
	// previous leader (see the package).
	"github.com/lockstep-dev/lockstep/pkg/scheduler/coscheduling"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(coscheduling.Name, coscheduling.New),
		app.WithPlugin(topologyplacement.Name, topologyplacement.New),
	)
	os.Exit(cli.Run(command))
}
