package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// InstallCRDs creates or updates every CRD in deploy/crds and waits until
// each is established.
func (c *Cluster) InstallCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(c.RepoRoot, "deploy", "crds", "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s/deploy/crds: run make generate", c.RepoRoot)
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		return filepath.Base(f) == "kustomization.yaml" // deploy/default's list of them
	})
	return c.ApplyCRDFiles(ctx, files, nil)
}

// ApplyCRDFiles applies each CRD in files that keep accepts (nil: every
// one) and waits until it is established (ApplyCRD).
func (c *Cluster) ApplyCRDFiles(ctx context.Context, files []string, keep func(*apiextensionsv1.CustomResourceDefinition) bool) error {
	for _, f := range files {
		crds, err := ReadCRDs(f)
		if err != nil {
			return err
		}
		for _, crd := range crds {
			if keep != nil && !keep(crd) {
				continue
			}
			if err := c.ApplyCRD(ctx, crd); err != nil {
				return fmt.Errorf("installing CRD %s from %s: %w", crd.Name, f, err)
			}
		}
	}
	return nil
}

// ReadCRDs reads the CustomResourceDefinitions of a YAML or JSON file, ours
// or a peer's.
func ReadCRDs(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if crd.Name != "" {
			crds = append(crds, crd)
		}
	}
	return crds, nil
}

// ApplyCRD creates or updates a CustomResourceDefinition and waits until it
// is established, so objects of its kind can be created at once after.
func (c *Cluster) ApplyCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	existing := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Client.Create(ctx, crd); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		existing.Spec = crd.Spec
		existing.Labels, existing.Annotations = crd.Labels, crd.Annotations
		if err := c.Client.Update(ctx, existing); err != nil {
			return err
		}
	}
	// Kueue's CRDs are large: a loaded apiserver (the e2e shards beside
	// the unit tests) has taken over a minute to establish one.
	return Poll(ctx, 100*time.Millisecond, 3*time.Minute, "CRD "+crd.Name+" established", func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// nodeWorkers bounds concurrent node writes: enough to create the 5,000-node
// model in seconds without tripping the apiserver's in-flight limit.
const nodeWorkers = 32

// CreateNodes creates the nodes (with their status: capacity, allocatable)
// concurrently. Nodes that already exist are replaced, so a rerun against an
// existing cluster starts from the model's state.
func (c *Cluster) CreateNodes(ctx context.Context, nodes []*corev1.Node) error {
	errs := make([]error, len(nodes))
	workqueue.ParallelizeUntil(ctx, nodeWorkers, len(nodes), func(i int) {
		errs[i] = c.createNode(ctx, nodes[i])
	})
	return errors.Join(errs...)
}

func (c *Cluster) createNode(ctx context.Context, node *corev1.Node) error {
	nodes := c.Clientset.CoreV1().Nodes()
	_, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if err := nodes.Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing node %s: %w", node.Name, err)
		}
		_, err = nodes.Create(ctx, node, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating node %s: %w", node.Name, err)
	}
	return nil
}

// DeleteNodes deletes the nodes, ignoring those already gone.
func (c *Cluster) DeleteNodes(ctx context.Context, nodes []*corev1.Node) error {
	errs := make([]error, len(nodes))
	workqueue.ParallelizeUntil(ctx, nodeWorkers, len(nodes), func(i int) {
		err := c.Clientset.CoreV1().Nodes().Delete(ctx, nodes[i].Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs[i] = fmt.Errorf("deleting node %s: %w", nodes[i].Name, err)
		}
	})
	return errors.Join(errs...)
}

// WaitNodesReady waits until every model node reports Ready and carries no
// not-ready taint, so the scheduler will consider it.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	want := map[string]bool{}
	for _, n := range c.Model.Nodes() {
		want[n.Name] = true
	}
	var notReady []string
	err := Poll(ctx, 250*time.Millisecond, timeout, "model nodes Ready", func(ctx context.Context) (bool, error) {
		// The node lifecycle controller clears new nodes' not-ready
		// taints: kube-controller-manager must run, and is started again
		// as a kubelet would if it exited.
		if _, err := c.restartExited(ctx); err != nil {
			return false, err
		}
		list, err := c.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready := map[string]bool{}
		for i := range list.Items {
			if NodeSchedulable(&list.Items[i]) {
				ready[list.Items[i].Name] = true
			}
		}
		notReady = notReady[:0]
		for name := range want {
			if !ready[name] {
				notReady = append(notReady, name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		sort.Strings(notReady)
		if len(notReady) > 5 {
			notReady = append(notReady[:5], fmt.Sprintf("and %d more", len(notReady)-5))
		}
		return fmt.Errorf("%w; not ready: %v%s", err, notReady, c.exitedControlPlane())
	}
	return nil
}

// exitedControlPlane names the local control plane's components that are
// no longer running, for an error that a wait on the cluster timed out:
// "" when every one runs.
func (c *Cluster) exitedControlPlane() string {
	if c.local == nil {
		return ""
	}
	exited, err := c.local.exited()
	if err != nil {
		return fmt.Sprintf("; reading the control plane's pid files: %v", err)
	}
	if len(exited) == 0 {
		return ""
	}
	var b strings.Builder
	for _, name := range exited {
		b.WriteString("; " + c.local.exitReport(name))
	}
	return b.String()
}

// NodeSchedulable reports whether a node is Ready and free of the taints the
// node lifecycle controller puts on nodes that are not.
func NodeSchedulable(n *corev1.Node) bool {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return ready
}

// Poll calls cond every interval, first at once, until it returns true or an
// error, or timeout passes; the error names what was awaited.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	if err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s (up to %s): %w", what, timeout, err)
	}
	return nil
}

// WaitTopologyPublished waits until the topology agent has published a
// NodeTopology for every model node. The agent creates each one with its
// spec whole, so counting names is enough; listing metadata only keeps the
// poll cheap on the 5,000-node model, whose full list is about 75 MB of
// JSON the apiserver would otherwise encode every poll.
func (c *Cluster) WaitTopologyPublished(ctx context.Context, timeout time.Duration) error {
	want := map[string]bool{}
	for _, n := range c.Model.Nodes() {
		want[n.Name] = true
	}
	return Poll(ctx, time.Second, timeout, fmt.Sprintf("NodeTopology for all %d nodes", len(want)), func(ctx context.Context) (bool, error) {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeTopologyList"))
		if err := c.Client.List(ctx, list); err != nil {
			return false, nil
		}
		published := 0
		for _, nt := range list.Items {
			if want[nt.Name] {
				published++
			}
		}
		return published == len(want), nil
	})
}
