// Package framework is what the e2e suite adds to the local cluster harness
// (pkg/localcluster): a namespace per test, the peer operators the interop
// tests run (Kubeflow training-operator, Kueue, KubeRay), replicas under
// leader election, a fault-injecting apiserver proxy, darkened nodes, and
// reading components' metrics and sockets. It lives under test/ so that the
// harness, which make demo, make cluster-up and the benchmark link, carries
// none of it; internal/arch keeps the arrows that way.
package framework

import (
	"context"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// Cluster is the harness's cluster with the suite's helpers.
type Cluster struct {
	*localcluster.Cluster
}

// Start starts a harness cluster (localcluster.Start) for the suite.
func Start(ctx context.Context, opts localcluster.Options) (*Cluster, error) {
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Cluster{c}, nil
}
