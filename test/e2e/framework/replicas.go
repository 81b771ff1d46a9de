package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// FastLeaderElection is a lease short enough for failover tests: a standby
// takes over at most about 4 s after the leader dies, while the leader
// still has six tries to renew on a loaded machine.
func FastLeaderElection() localcluster.LeaderElection {
	return localcluster.LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
}

// SchedulerReplicaComponent describes one replica of lockstep-scheduler
// with leader election on: like SchedulerComponent, but any number of
// replicas, each under its own name (scheduler-a, scheduler-b), may run at
// once and only the holder of the Lease schedules.
func (c *Cluster) SchedulerReplicaComponent(name string, le localcluster.LeaderElection) (localcluster.Component, error) {
	cfg, err := localcluster.DeployedSchedulerConfig(c.RepoRoot)
	if err != nil {
		return localcluster.Component{}, err
	}
	return c.KubeSchedulerComponentWith(name, localcluster.SchedulerName, cfg, localcluster.SchedulerOptions{LeaderElection: &le})
}

// ControllerReplicaComponent describes one replica of the TrainingJob
// controller with leader election on, its Lease in lockstep-system.
func (c *Cluster) ControllerReplicaComponent(name string, le localcluster.LeaderElection) (localcluster.Component, error) {
	return c.ControllerComponentWith(name, localcluster.ControllerOptions{SchedulerName: localcluster.SchedulerName, LeaderElection: &le})
}

// Leader returns which of the running replicas leads: the one whose
// leader_election_master_status gauge is 1. Both kube-scheduler and
// controller-runtime set it when they acquire their Lease, and neither
// writes an identity to its log or its flags that the Lease's
// holderIdentity (hostname_uuid) could be matched with. It returns "" when
// none leads, and an error when more than one claims to.
func (c *Cluster) Leader(ctx context.Context, replicas ...string) (string, error) {
	var leaders []string
	for _, name := range replicas {
		if _, running := c.Component(name); !running {
			continue
		}
		samples, err := c.Scrape(ctx, name)
		if err != nil {
			continue // starting, or just killed
		}
		if samples.Find("leader_election_master_status", nil).Sum() >= 1 {
			leaders = append(leaders, name)
		}
	}
	switch len(leaders) {
	case 0:
		return "", nil
	case 1:
		return leaders[0], nil
	default:
		sort.Strings(leaders)
		return "", fmt.Errorf("more than one replica leads: %s", strings.Join(leaders, ", "))
	}
}

// WaitLeader waits until exactly one of the replicas leads and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration, replicas ...string) (string, error) {
	var leader string
	var last error
	err := localcluster.Poll(ctx, 100*time.Millisecond, timeout, "a leader among "+strings.Join(replicas, ", "), func(ctx context.Context) (bool, error) {
		leader, last = c.Leader(ctx, replicas...)
		return leader != "", nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %v)", err, last)
	}
	return leader, err
}
