package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// identityTestAnnotation is what the agent's token writes to prove it may.
const identityTestAnnotation = "lockstep.dev/identity-test"

// TestAgentIdentityWritesOnlyItsNode uses the real agent's ServiceAccount
// with a token bound to a pod on node A, as the DaemonSet's pod would have:
// it may update A's NodeTopology, the node-name policy denies B's, and RBAC
// denies Secrets.
func TestAgentIdentityWritesOnlyItsNode(t *testing.T) {
	ctx := context.Background()
	nodes := cluster.Model.Nodes()
	nodeA, nodeB := nodes[0].Name, nodes[1].Name
	id := localcluster.AgentIdentity()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "identity-agent-", Namespace: id.Namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: id.Name,
			NodeName:           nodeA,
			Containers:         []corev1.Container{{Name: "agent", Image: "lockstep-topology-agent"}},
		},
	}
	pod, err := cluster.Clientset.CoreV1().Pods(id.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset.CoreV1().Pods(id.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	token, err := cluster.Token(ctx, id, pod, 600)
	if err != nil {
		t.Fatal(err)
	}
	agent := newClient(t, token)
	waitNodeTopology(t, nodeA, "published", func(*v1alpha1.NodeTopology) bool { return true })
	waitNodeTopology(t, nodeB, "published", func(*v1alpha1.NodeTopology) bool { return true })
	t.Cleanup(func() {
		for _, n := range []string{nodeA, nodeB} {
			_ = annotateNodeTopology(context.Background(), cluster.Client, n, nil)
		}
	})

	stamp := time.Now().Format(time.RFC3339Nano)
	if err := annotateNodeTopology(ctx, agent, nodeA, &stamp); err != nil {
		t.Errorf("agent on %s updating its own NodeTopology: %v", nodeA, err)
	}
	err = annotateNodeTopology(ctx, agent, nodeB, &stamp)
	const wantMessage = "may only write the NodeTopology and Node of that node"
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || err == nil || !strings.Contains(err.Error(), wantMessage) {
		t.Errorf("agent on %s updating %s's NodeTopology: got %v, want the node-name policy's denial (%q)", nodeA, nodeB, err, wantMessage)
	}

	var secrets corev1.SecretList
	if err := agent.List(ctx, &secrets, client.InNamespace(id.Namespace)); !apierrors.IsForbidden(err) {
		t.Errorf("agent listing Secrets: got %v, want Forbidden", err)
	}
	err = agent.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "any"}, &corev1.Secret{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("agent getting a Secret: got %v, want Forbidden", err)
	}
}

// TestControllerIdentityCannotBind checks the controller's ServiceAccount
// can read its jobs but cannot bind pods: placing them is the scheduler's.
func TestControllerIdentityCannotBind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	token, err := cluster.Token(ctx, localcluster.ControllerIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	controller := newClient(t, token)
	var jobs v1alpha1.TrainingJobList
	if err := controller.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
		t.Fatalf("controller listing TrainingJobs (its own job): %v", err)
	}
	// Not for any scheduler, so nothing binds it but the attempt below.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound", Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: "no-such-scheduler",
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	cluster.CreatePods(t, pod)
	cs := newClientset(t, token)
	err = cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns},
		Target:     corev1.ObjectReference{Kind: "Node", Name: cluster.Model.Nodes()[0].Name},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("controller binding a pod: got %v, want Forbidden", err)
	}
}

// TestSchedulerIdentityCannotTouchJobsOrSecrets checks the scheduler's
// ServiceAccount reads pods but neither TrainingJobs nor Secrets.
func TestSchedulerIdentityCannotTouchJobsOrSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	token, err := cluster.Token(ctx, localcluster.SchedulerIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	scheduler := newClient(t, token)
	if err := scheduler.List(ctx, &corev1.PodList{}, client.InNamespace(ns)); err != nil {
		t.Fatalf("scheduler listing pods (its own job): %v", err)
	}
	job := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "denied", Namespace: ns}}
	for _, tc := range []struct {
		what string
		call func() error
	}{
		{"listing TrainingJobs", func() error { return scheduler.List(ctx, &v1alpha1.TrainingJobList{}, client.InNamespace(ns)) }},
		{"getting a TrainingJob", func() error { return scheduler.Get(ctx, client.ObjectKeyFromObject(job), &v1alpha1.TrainingJob{}) }},
		{"deleting a TrainingJob", func() error { return scheduler.Delete(ctx, job) }},
		{"listing Secrets", func() error { return scheduler.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }},
		{"creating a Secret", func() error {
			return scheduler.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "denied", Namespace: ns}})
		}},
	} {
		if err := tc.call(); !apierrors.IsForbidden(err) {
			t.Errorf("scheduler %s: got %v, want Forbidden", tc.what, err)
		}
	}
}

// annotateNodeTopology sets (value non-nil) or removes the test annotation,
// retrying conflicts with the agent's own writes.
func annotateNodeTopology(ctx context.Context, c client.Client, node string, value *string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nt := &v1alpha1.NodeTopology{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, nt); err != nil {
			return err
		}
		if value == nil {
			if _, ok := nt.Annotations[identityTestAnnotation]; !ok {
				return nil
			}
			delete(nt.Annotations, identityTestAnnotation)
		} else {
			if nt.Annotations == nil {
				nt.Annotations = map[string]string{}
			}
			nt.Annotations[identityTestAnnotation] = *value
		}
		return c.Update(ctx, nt)
	})
}

func newClient(t *testing.T, token string) client.Client {
	t.Helper()
	scheme, err := localcluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cluster.ConfigForToken(token), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newClientset(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
