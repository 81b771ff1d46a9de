package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// cluster is what the cluster commands read through.
type cluster struct {
	// core is the core/v1 client alone: the whole clientset would add every
	// API group to the binary.
	core    corev1client.CoreV1Interface
	dynamic dynamic.Interface
	// namespace is -n's, or the kubeconfig context's, or "default".
	namespace string
}

// connector makes the clients from the kubeconfig flags; tests pass one that
// returns fakes.
type connector func(*genericclioptions.ConfigFlags) (*cluster, error)

// connectKubeconfig is the connector of the real command: kubectl's loading
// rules ($KUBECONFIG, ~/.kube/config, in-cluster) and flags.
func connectKubeconfig(flags *genericclioptions.ConfigFlags) (*cluster, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the dynamic client: %w", err)
	}
	return &cluster{core: core, dynamic: dyn, namespace: ns}, nil
}

// listNodeTopologies returns every NodeTopology by name; none when the CRD
// is not installed, as on a cluster without the topology agent.
func (c *cluster) listNodeTopologies(ctx context.Context) (map[string]*v1alpha1.NodeTopology, error) {
	list, err := c.dynamic.Resource(nodeTopologiesResource()).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing NodeTopologies: %w", err)
	}
	out := make(map[string]*v1alpha1.NodeTopology, len(list.Items))
	for i := range list.Items {
		nt := &v1alpha1.NodeTopology{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, nt); err != nil {
			return nil, fmt.Errorf("decoding NodeTopology %s: %w", list.Items[i].GetName(), err)
		}
		out[nt.Name] = nt
	}
	return out, nil
}
