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

	"github.com/lockstep-dev/lockstep/pkg/scheduler"
)

func main() {
	command := app.NewSchedulerCommand(scheduler.OutOfTree()...)
	os.Exit(cli.Run(command))
}
