package framework

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// darkLeaseHolder holds the Lease of a node DarkenNode took from KWOK.
const darkLeaseHolder = "lockstep-e2e-dark-node"

// darkLeaseSeconds keeps a darkened node's Lease from expiring while a
// test runs: KWOK takes over an expired Lease of another holder.
const darkLeaseSeconds = int32(24 * 60 * 60)

// DarkenNode makes KWOK stop serving a node, as a kernel panic, a NIC going
// down or a power loss would: no more Lease renewals, no node status, and
// the pods there are never again updated nor confirmed deleted, so a plain
// delete leaves them Terminating for good. The node object stays; the real
// kube-controller-manager does the rest, as in a real cluster: once
// node-monitor-grace-period (50 s) passes without a heartbeat it marks the
// node Ready Unknown and taints it node.kubernetes.io/unreachable
// (NoSchedule and NoExecute), and its taint manager evicts the pods when
// their tolerations run out.
//
// KWOK v0.7 serves a node only while it holds the node's Lease (its
// controllers treat a node whose Lease another holder has as read-only,
// nodes and pods alike), and it takes a Lease over only once it expired.
// So the node's Lease is given to another holder, renewed once, with a day
// to run: the node lifecycle controller sees one last heartbeat, then
// silence. Changing the annotation KWOK selects nodes by is not enough:
// KWOK's informer filters the update out, and it goes on holding and
// renewing the Lease of a node it no longer selects.
//
// KWOK v0.7 starts its node and pod controllers in map order, and its pod
// controller only honours the Lease when it started after the node one: so
// the pods already on the node are also annotated
// lockstep.dev/simulated-node-dark, which our stages never play on. A pod
// bound to the node after it went dark, before the node lifecycle
// controller taints it NoSchedule, may still be started by KWOK.
//
// KWOK also plays a stage it queued before the Lease was taken, with the
// node as it was then: the node's next heartbeat (lockstep-node-heartbeat,
// 5 to 15 minutes out) would mark the dead node Ready again with its
// living conditions. So the node is annotated dark first, which makes
// KWOK replace that heartbeat with lockstep-node-dark, and its
// SimulatedNodeDark event says it did, before the Lease is taken.
func (c *Cluster) DarkenNode(ctx context.Context, name string) error {
	if err := c.markPodsDark(ctx, name, true); err != nil {
		return err
	}
	// Event times are whole seconds; an event of an earlier darkening of
	// the node is older.
	since := time.Now().Truncate(time.Second)
	if err := c.markNodeDark(ctx, name, true); err != nil {
		return err
	}
	err := localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "KWOK dropping the stages it queued for node "+name+" (its "+lockstep.EventSimulatedNodeDark+" event)", func(ctx context.Context) (bool, error) {
		events, err := c.Events(ctx, corev1.NamespaceDefault, "Node", name)
		if err != nil {
			return false, nil
		}
		for _, e := range events {
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if e.Reason == lockstep.EventSimulatedNodeDark && !at.Before(since) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	leases := c.Clientset.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder, seconds := darkLeaseHolder, darkLeaseSeconds
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = &holder
		lease.Spec.LeaseDurationSeconds = &seconds
		lease.Spec.AcquireTime = &now
		lease.Spec.RenewTime = &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("taking the Lease of node %s from KWOK: %w", name, err)
	}
	return nil
}

// RestoreNode hands a node DarkenNode darkened back to KWOK: its dark
// annotation is removed, then its Lease is deleted, KWOK creates a new one
// within its renew interval and serves the node again (looking at it
// afresh once it holds the Lease, when lockstep-node-ready marks it
// Ready), and the node lifecycle controller lifts the taints. Pods left on
// it are KWOK's again too (a Terminating one goes at once).
func (c *Cluster) RestoreNode(ctx context.Context, name string) error {
	if err := c.markNodeDark(ctx, name, false); err != nil {
		return err
	}
	err := c.Clientset.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("handing node %s back to KWOK: %w", name, err)
	}
	return c.markPodsDark(ctx, name, false)
}

// markNodeDark sets or removes lockstep.dev/simulated-node-dark on a node.
func (c *Cluster) markNodeDark(ctx context.Context, node string, dark bool) error {
	value := `"true"`
	if !dark {
		value = "null"
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, lockstep.AnnotationSimulatedNodeDark, value))
	if _, err := c.Clientset.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("marking node %s dark=%t: %w", node, dark, err)
	}
	return nil
}

// markPodsDark sets or removes lockstep.dev/simulated-node-dark on the pods
// bound to a node.
func (c *Cluster) markPodsDark(ctx context.Context, node string, dark bool) error {
	pods, err := c.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	value := `"true"`
	if !dark {
		value = "null"
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, lockstep.AnnotationSimulatedNodeDark, value))
	for _, p := range pods.Items {
		if _, has := p.Annotations[lockstep.AnnotationSimulatedNodeDark]; has == dark {
			continue
		}
		_, err := c.Clientset.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking pod %s/%s on node %s: %w", p.Namespace, p.Name, node, err)
		}
	}
	return nil
}
