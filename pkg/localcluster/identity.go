package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Identity is a component's ServiceAccount, as deploy/ defines it.
type Identity struct {
	Namespace, Name string
}

func (id Identity) String() string { return id.Namespace + "/" + id.Name }

// Objects are what an identity is made of: its Namespace and its
// ServiceAccount, to apply before the roles bound to it.
func (id Identity) Objects() (namespace, serviceAccount *unstructured.Unstructured) {
	return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": id.Namespace},
		}}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": id.Name, "namespace": id.Namespace},
		}}
}

// Subject is the identity as a RoleBinding or ClusterRoleBinding subject.
func (id Identity) Subject() map[string]any {
	return map[string]any{"kind": "ServiceAccount", "name": id.Name, "namespace": id.Namespace}
}

// SchedulerIdentity is lockstep-scheduler's ServiceAccount.
func SchedulerIdentity() Identity {
	return Identity{Namespace: "lockstep-system", Name: "lockstep-scheduler"}
}

// ControllerIdentity is lockstep-controller's ServiceAccount.
func ControllerIdentity() Identity {
	return Identity{Namespace: "lockstep-system", Name: "lockstep-controller"}
}

// FakeAgentIdentity is deploy/kind's fake-mode agent's ServiceAccount,
// which the suite's fake agent runs as. Unlike the real agent's, it is not
// held to one node by the node-name policy: it serves every fake node.
func FakeAgentIdentity() Identity {
	return Identity{Namespace: "lockstep-system", Name: "lockstep-fake-topology-agent"}
}

// AgentIdentity is the real (DaemonSet) agent's ServiceAccount.
func AgentIdentity() Identity {
	return Identity{Namespace: "lockstep-agent", Name: "lockstep-topology-agent"}
}

// MetricsScraperIdentity is the ServiceAccount the harness scrapes metrics
// as, a stand-in for a monitoring stack's: InstallIdentities makes it in a
// namespace labelled lockstep.LabelMetricsScraper and binds it to deploy/'s
// lockstep-metrics-reader, nothing else.
func MetricsScraperIdentity() Identity {
	return Identity{Namespace: "lockstep-monitoring", Name: "metrics-scraper"}
}

// identityKinds are the objects of the rendered overlay that make up the
// components' identities and what they may do; workloads are not applied
// (the harness runs the binaries itself).
var identityKinds = map[string]bool{
	"Namespace":                        true,
	"ServiceAccount":                   true,
	"ClusterRole":                      true,
	"ClusterRoleBinding":               true,
	"Role":                             true,
	"RoleBinding":                      true,
	"ValidatingAdmissionPolicy":        true,
	"ValidatingAdmissionPolicyBinding": true,
}

// componentTokenSeconds is how long the components' tokens live: beyond any
// test run, and a month for clusters left up by cluster-up or demo.
const componentTokenSeconds = 30 * 24 * 60 * 60

// fieldManager owns what the harness applies.
const fieldManager = "lockstep-e2e"

// InstallIdentities applies deploy/kind's ServiceAccounts, RBAC and
// admission policies (deploy/default's plus the fake agent's) server-side,
// rendered with bin/kubectl kustomize, so the components run with exactly
// the privileges a real install gives them.
func (c *Cluster) InstallIdentities(ctx context.Context) error {
	kubectl := filepath.Join(c.RepoRoot, "bin", "kubectl")
	overlay := filepath.Join(c.RepoRoot, "deploy", "kind")
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", overlay)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s: %w: %s", overlay, err, strings.TrimSpace(stderr.String()))
	}
	objs, err := DecodeObjects(out)
	if err != nil {
		return fmt.Errorf("rendering %s: %w", overlay, err)
	}
	var identities []*unstructured.Unstructured
	for _, o := range objs {
		if identityKinds[o.GetKind()] {
			identities = append(identities, o)
		}
	}
	if err := c.Apply(ctx, identities...); err != nil {
		return fmt.Errorf("%s: %w", overlay, err)
	}
	return c.installMetricsScraper(ctx)
}

// Apply applies the objects server-side, in order, as the harness's field
// manager, taking over fields others set: what the harness installs
// (identities, peers' RBAC and webhooks) is the state it wants, whoever
// wrote it before.
func (c *Cluster) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := c.Client.Patch(ctx, o, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// installMetricsScraper makes MetricsScraperIdentity as an operator would
// for Prometheus: its namespace labelled for the metrics NetworkPolicies,
// and a binding to lockstep-metrics-reader.
func (c *Cluster) installMetricsScraper(ctx context.Context) error {
	id := MetricsScraperIdentity()
	ns, sa := id.Objects()
	ns.SetLabels(map[string]string{lockstep.LabelMetricsScraper: "true"})
	return c.Apply(ctx, ns, sa, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "lockstep-e2e-metrics-scraper"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "lockstep-metrics-reader"},
		"subjects": []any{id.Subject()},
	}})
}

// ReadObjects reads a multi-document YAML file (a peer's manifests) into
// objects (DecodeObjects); errors name the file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return objs, nil
}

// DecodeObjects decodes a multi-document YAML stream (a rendered overlay, a
// peer's manifests) into objects, skipping empty documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(j)) == 0 || string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, err
		}
		objs = append(objs, u)
	}
}

// Token returns a token of the identity's ServiceAccount from the
// TokenRequest API. With boundPod set the token is bound to that pod, as a
// kubelet-mounted token is, and so carries the pod's node in its
// authentication.kubernetes.io/node-name claim.
func (c *Cluster) Token(ctx context.Context, id Identity, boundPod *corev1.Pod, seconds int64) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if boundPod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: boundPod.Name, UID: boundPod.UID,
		}
	}
	resp, err := c.Clientset.CoreV1().ServiceAccounts(id.Namespace).CreateToken(ctx, id.Name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s: %w", id, err)
	}
	return resp.Status.Token, nil
}

// ConfigForToken returns a client config that reaches the cluster like the
// admin's (server, CA) but authenticates with token only.
func (c *Cluster) ConfigForToken(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

// IdentityKubeconfig writes, once, a kubeconfig for the identity: the admin
// kubeconfig's server and CA with a token of the ServiceAccount. Components
// restarted later reuse it; so do the e2e suite's peers
// (test/e2e/framework), each run as its own ServiceAccount.
func (c *Cluster) IdentityKubeconfig(id Identity) (string, error) {
	path := filepath.Join(c.Dir, "identities", id.Namespace+"."+id.Name+".kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	kctx, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return "", fmt.Errorf("%s: no current context", c.Kubeconfig)
	}
	cluster, ok := raw.Clusters[kctx.Cluster]
	if !ok {
		return "", fmt.Errorf("%s: context %s names no known cluster", c.Kubeconfig, raw.CurrentContext)
	}
	if err := clientcmdapi.FlattenConfig(raw); err != nil {
		return "", fmt.Errorf("%s: %w", c.Kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, err := c.Token(ctx, id, nil, componentTokenSeconds)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = cluster.DeepCopy()
	cfg.AuthInfos[id.Name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[id.Name] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: id.Name, Namespace: id.Namespace}
	cfg.CurrentContext = id.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s: %w", id, err)
	}
	return path, nil
}
