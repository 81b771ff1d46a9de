package localcluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LeaderElection configures the Lease of replicated components: how long a
// lease lasts without renewal, how long the leader keeps retrying a renewal
// before it gives up leading, and how often replicas try.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// FastLeaderElection is a lease short enough for failover tests: a standby
// takes over at most about 4 s after the leader dies, while the leader
// still has six tries to renew on a loaded machine.
func FastLeaderElection() LeaderElection {
	return LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
}

// The Leases replicas elect their leader through: deploy/'s, so the
// ServiceAccounts' RBAC allows them.
const (
	SchedulerLeaseNamespace  = "kube-system"
	SchedulerLeaseName       = "lockstep-scheduler"
	ControllerLeaseNamespace = "lockstep-system"
	ControllerLeaseName      = "lockstep-controller.lockstep.dev"
)

// SchedulerReplicaComponent describes one replica of lockstep-scheduler
// with leader election on: like SchedulerComponent, but any number of
// replicas, each under its own name (scheduler-a, scheduler-b), may run at
// once and only the holder of the Lease schedules.
func (c *Cluster) SchedulerReplicaComponent(name string, le LeaderElection) (Component, error) {
	cfg, err := DeployedSchedulerConfig(c.RepoRoot)
	if err != nil {
		return Component{}, err
	}
	return c.kubeSchedulerComponent(name, SchedulerName, cfg, &le, nil)
}

// ControllerReplicaComponent describes one replica of the TrainingJob
// controller with leader election on, its Lease in lockstep-system.
func (c *Cluster) ControllerReplicaComponent(name string, le LeaderElection) (Component, error) {
	topo, err := c.TopologyConfigFile()
	if err != nil {
		return Component{}, err
	}
	return c.managerComponent(name, "lockstep-controller", ControllerIdentity(), controllerProbe,
		"--leader-elect=true",
		"--leader-election-namespace="+ControllerLeaseNamespace,
		"--leader-elect-lease-duration="+le.LeaseDuration.String(),
		"--leader-elect-renew-deadline="+le.RenewDeadline.String(),
		"--leader-elect-retry-period="+le.RetryPeriod.String(),
		"--scheduler-name="+SchedulerName, "--topology-config="+topo)
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
	err := Poll(ctx, 100*time.Millisecond, timeout, "a leader among "+strings.Join(replicas, ", "), func(ctx context.Context) (bool, error) {
		leader, last = c.Leader(ctx, replicas...)
		return leader != "", nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %v)", err, last)
	}
	return leader, err
}

// LeaseHolder returns the holderIdentity of a Lease, "" when it has none
// or does not exist.
func (c *Cluster) LeaseHolder(ctx context.Context, namespace, name string) (string, error) {
	lease, err := c.Clientset.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// StopComponent stops a component with SIGTERM, as a rolling update would,
// and waits up to grace before killing it.
func (c *Cluster) StopComponent(name string, grace time.Duration) error {
	c.mu.Lock()
	p, ok := c.components[name]
	delete(c.components, name)
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("component %s is not running", name)
	}
	return p.Stop(grace)
}

// Forget drops a component that exited by itself from the running ones, so
// it can be started again under its name. It reports whether it had exited.
func (c *Cluster) Forget(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.components[name]
	if !ok {
		return false
	}
	if exited, _ := p.Exited(); !exited {
		return false
	}
	delete(c.components, name)
	return true
}
