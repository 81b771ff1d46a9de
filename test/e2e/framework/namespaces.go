package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// NewNamespace creates a namespace for one test and, when the test ends,
// deletes it and waits until its pods are gone and no node's agent
// reports their GPUs any more, so the next test starts with every GPU free.
// It returns once pods can be created there.
//
// It also reports, as a failure of the test, a suite component (see
// ReviveComponents) that exited before the test or during it, and starts it
// again so that later tests are not blamed for it.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	if err := c.ReviveComponents(ctx); err != nil {
		t.Errorf("before this test: %v", err)
	}
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := c.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimRight(name, "-") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := c.ReviveComponents(ctx); err != nil {
			t.Errorf("during this test: %v", err)
		}
		c.deleteNamespace(t, ns.Name)
	})
	// Pod admission needs the namespace's default ServiceAccount, which
	// kube-controller-manager creates shortly after the namespace.
	err = localcluster.Poll(ctx, 100*time.Millisecond, 30*time.Second, "default ServiceAccount in "+ns.Name, func(ctx context.Context) (bool, error) {
		_, err := c.Clientset.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func (c *Cluster) deleteNamespace(t testing.TB, ns string) {
	ctx := context.Background()
	err := c.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", ns, err)
		return
	}
	// The test is over: what is left is wiped at once, as an operator
	// clears a namespace, rather than each pod's grace period waited out
	// (the harness plays it whole for the tests' own deletions). The
	// namespace is terminating first, so no controller creates pods anew.
	c.DeletePodsNow(t, ns)
	err = localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "pods of namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
		return
	}
	// The agents report the pods' GPUs free at their next read (up to
	// lockstep.AgentResyncInterval later): until then the next test
	// would find them taken.
	err = c.WaitGPUsReleased(ctx, "GPUs of "+ns, func(a v1alpha1.GPUAllocation) bool { return a.Namespace == ns })
	if err != nil {
		t.Errorf("cleaning up: %v", err)
	}
}

// podDeleteWorkers is how many pod deletions DeletePodsNow has at the
// apiserver at once.
const podDeleteWorkers = 4

// DeletePodsNow deletes every pod of ns with grace period 0, a few
// requests at a time, and fails the test on an error other than a pod
// already gone. One DeleteCollection of a few hundred pods outlasted the
// apiserver's request timeout on a loaded 2-core machine ("unable to
// return a response in the time allotted"), and the burst of deletions
// behind it starved the control plane's lease renewals.
func (c *Cluster) DeletePodsNow(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	pods, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing the pods of namespace %s to delete: %v", ns, err)
		return
	}
	errs := make([]error, len(pods.Items))
	workqueue.ParallelizeUntil(ctx, podDeleteWorkers, len(pods.Items), func(i int) {
		err := c.Clientset.CoreV1().Pods(ns).Delete(ctx, pods.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs[i] = err
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Errorf("deleting the pods of namespace %s: %v", ns, err)
	}
}

// WaitGPUsReleased waits until no node's agent reports an allocation that
// held says is one of what: the agents report pods gone at their next read
// (up to lockstep.AgentResyncInterval after they went), so until then the
// scheduler sees their GPUs taken.
func (c *Cluster) WaitGPUsReleased(ctx context.Context, what string, held func(v1alpha1.GPUAllocation) bool) error {
	return localcluster.Poll(ctx, 250*time.Millisecond, time.Minute, "no NodeTopology reporting "+what, func(ctx context.Context) (bool, error) {
		var list v1alpha1.NodeTopologyList
		if err := c.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		for _, nt := range list.Items {
			for _, a := range nt.Status.Allocations {
				if held(a) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// CreatePods creates the pods, failing the test on the first error.
func (c *Cluster) CreatePods(t testing.TB, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := c.Clientset.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// Pods lists the pods of a namespace.
func (c *Cluster) Pods(ctx context.Context, ns string) ([]corev1.Pod, error) {
	list, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	return list.Items, nil
}

// BoundPods returns those of pods that are bound to a node.
func BoundPods(pods []corev1.Pod) []corev1.Pod {
	var bound []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		}
	}
	return bound
}

// Events returns the events about an object.
func (c *Cluster) Events(ctx context.Context, ns, kind, name string) ([]corev1.Event, error) {
	selector := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	list, err := c.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing events of %s %s/%s: %w", kind, ns, name, err)
	}
	return list.Items, nil
}

// HasEvent reports whether events holds one with the reason, reported by the
// component if it is not empty.
func HasEvent(events []corev1.Event, reason, component string) bool {
	for _, e := range events {
		if e.Reason != reason {
			continue
		}
		if component == "" || e.ReportingController == component || e.Source.Component == component {
			return true
		}
	}
	return false
}
