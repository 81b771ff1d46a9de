package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeCriticalFile is the node-critical DaemonSet every fake node runs
// (deploy/kwok/node-critical.yaml), relative to the repository root.
var NodeCriticalFile = filepath.Join("deploy", "kwok", "node-critical.yaml")

// DefaultSchedulerName is the scheduler of pods that name none: the
// cluster's own kube-scheduler, which binds the DaemonSets' pods.
const DefaultSchedulerName = "default-scheduler"

// InstallNodeCritical creates the node-critical DaemonSet
// (NodeCriticalFile): a pod at system-node-critical priority on every fake
// node, as kube-proxy and the device plugin are on every real one. The
// default scheduler (DefaultSchedulerComponent) binds its pods.
func (c *Cluster) InstallNodeCritical(ctx context.Context) error {
	objs, err := ReadObjects(filepath.Join(c.RepoRoot, NodeCriticalFile))
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, objs...); err != nil {
		return fmt.Errorf("%s: %w", NodeCriticalFile, err)
	}
	return nil
}

// DefaultSchedulerComponent describes the cluster's default scheduler:
// upstream kube-scheduler at our Kubernetes pin with its default profile,
// as every real control plane runs beside Lockstep's. It schedules what
// names no scheduler: the DaemonSets' pods, and any pod a test or a peer
// operator leaves to the default.
func (c *Cluster) DefaultSchedulerComponent() (Component, error) {
	return c.KubeSchedulerComponent(DefaultSchedulerName, "kube-scheduler", map[string]any{
		"apiVersion": "kubescheduler.config.k8s.io/v1",
		"kind":       "KubeSchedulerConfiguration",
		"profiles":   []any{map[string]any{"schedulerName": DefaultSchedulerName}},
	})
}

// WaitNodeCritical waits until the node-critical DaemonSet runs a ready pod
// on every node it selects.
func (c *Cluster) WaitNodeCritical(ctx context.Context, timeout time.Duration) error {
	objs, err := ReadObjects(filepath.Join(c.RepoRoot, NodeCriticalFile))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		var last appsv1.DaemonSetStatus
		err := Poll(ctx, time.Second, timeout, fmt.Sprintf("DaemonSet %s/%s on every node", o.GetNamespace(), o.GetName()), func(ctx context.Context) (bool, error) {
			ds, err := c.Clientset.AppsV1().DaemonSets(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = ds.Status
			return ds.Status.ObservedGeneration >= ds.Generation && ds.Status.DesiredNumberScheduled > 0 &&
				ds.Status.NumberReady == ds.Status.DesiredNumberScheduled, nil
		})
		if err != nil {
			return fmt.Errorf("%w (desired %d, ready %d)", err, last.DesiredNumberScheduled, last.NumberReady)
		}
	}
	return nil
}
