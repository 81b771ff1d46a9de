package framework

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Kueue (sigs.k8s.io/kueue, pinned in hack/tools/kueue/go.mod, built into
// bin/kueue by hack/tools.sh) run as a real peer: its CRDs, RBAC and
// webhooks from the pinned module, its controller-manager as a process
// against the cluster with a Configuration written here.

// KueueIdentity is the ServiceAccount Kueue runs as, bound to Kueue's own
// manager ClusterRole (config/components/rbac/role.yaml of the module).
func KueueIdentity() localcluster.Identity {
	return localcluster.Identity{Namespace: "kueue-system", Name: "kueue-controller-manager"}
}

// kueueMetricsCertDir is where Kueue v0.17 reads its metrics serving
// certificate when internalCertManagement is off: a fixed path in its
// main, not configurable.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// InstallKueue installs Kueue's CRDs (config/components/crd/bases of the
// pinned module) and its identity: namespace, ServiceAccount, and Kueue's
// generated manager ClusterRole bound to it.
func (c *Cluster) InstallKueue(ctx context.Context) error {
	mod, err := c.toolModuleDir(ctx, "kueue", "sigs.k8s.io/kueue")
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(mod, "config", "components", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s: %v", mod, err)
	}
	if err := c.ApplyCRDFiles(ctx, files, nil); err != nil {
		return err
	}
	// Kueue's own least privilege: its manager ClusterRole, and its Role
	// on Secrets of its namespace (it watches them there).
	id := KueueIdentity()
	subjects := []any{id.Subject()}
	ns, sa := id.Objects()
	objs := []*unstructured.Unstructured{ns, sa}
	for file, kind := range map[string]string{"role.yaml": "ClusterRole", "manager_secrets_role.yaml": "Role"} {
		path := filepath.Join(mod, "config", "components", "rbac", file)
		roles, err := localcluster.ReadObjects(path)
		if err != nil || len(roles) != 1 || roles[0].GetKind() != kind {
			return fmt.Errorf("%s: want one %s (%v)", path, kind, err)
		}
		role := roles[0]
		role.SetName("kueue-" + role.GetName())
		binding := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind + "Binding",
			"metadata": map[string]any{"name": role.GetName() + "binding"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role.GetName()},
			"subjects": subjects,
		}}
		if kind == "Role" {
			role.SetNamespace(id.Namespace)
			binding.SetNamespace(id.Namespace)
		}
		objs = append(objs, role, binding)
	}
	return c.Apply(ctx, objs...)
}

// kueuePorts are the loopback ports of one Kueue process.
type kueuePorts struct{ health, metrics, webhook int }

// KueueComponent describes Kueue's controller-manager on this cluster: a
// Configuration with loopback ports, the batch/job integration (Kueue's
// default; it touches only Jobs labelled with a queue) and TrainingJob as
// an external framework, no leader election, webhook certificates made
// here (internalCertManagement off: it would need a Service in front of
// the webhook server), and the visibility API server off (its own
// aggregated apiserver, which nothing here uses), and Kueue's elastic
// Workload slices on (ElasticJobsViaWorkloadSlices). It also returns the
// webhook server's port and CA for RegisterKueueWebhooks.
func (c *Cluster) KueueComponent() (localcluster.Component, int, []byte, error) {
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	p := kueuePorts{health: ports[0], metrics: ports[1], webhook: ports[2]}
	dir := filepath.Join(c.Dir, "kueue")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	caPEM, keyPEM, err := selfSignedLoopbackPEM("kueue-webhook")
	if err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.crt"), caPEM, 0o600); err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	if err := os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600); err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	if err := ensureKueueMetricsCerts(); err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	kubeconfig, err := c.IdentityKubeconfig(KueueIdentity())
	if err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	cfg := map[string]any{
		"apiVersion":                 "config.kueue.x-k8s.io/v1beta2",
		"kind":                       "Configuration",
		"namespace":                  KueueIdentity().Namespace,
		"health":                     map[string]any{"healthProbeBindAddress": fmt.Sprintf("127.0.0.1:%d", p.health)},
		"metrics":                    map[string]any{"bindAddress": fmt.Sprintf("127.0.0.1:%d", p.metrics)},
		"webhook":                    map[string]any{"host": "127.0.0.1", "port": p.webhook, "certDir": certDir},
		"leaderElection":             map[string]any{"leaderElect": false},
		"internalCertManagement":     map[string]any{"enable": false},
		"manageJobsWithoutQueueName": false,
		"integrations": map[string]any{
			"frameworks":         []any{"batch/job"},
			"externalFrameworks": []any{lockstep.KueueExternalFramework},
		},
		// ElasticJobsViaWorkloadSlices (alpha, off by default in v0.17):
		// elastic TrainingJobs resize as Workload slices, which Kueue's
		// webhook and scheduler accept only with it on.
		"featureGates": map[string]any{"VisibilityOnDemand": false, "ElasticJobsViaWorkloadSlices": true},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		return localcluster.Component{}, 0, nil, err
	}
	return localcluster.Component{
		Name:   "kueue",
		Binary: "kueue",
		Args:   []string{"--config=" + cfgPath, "--kubeconfig=" + kubeconfig, "--zap-log-level=2"},
		// readyz waits for the webhook server as well.
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", p.health),
	}, p.webhook, caPEM, nil
}

// ensureKueueMetricsCerts writes a self-signed certificate where Kueue
// reads its metrics one, unless one is there (a real install's, or an
// earlier run's). Kueue exits at start without it.
func ensureKueueMetricsCerts() error {
	crt, key := filepath.Join(kueueMetricsCertDir, "tls.crt"), filepath.Join(kueueMetricsCertDir, "tls.key")
	if _, err := os.Stat(crt); err == nil {
		if _, err := os.Stat(key); err == nil {
			return nil
		}
	}
	certPEM, keyPEM, err := selfSignedLoopbackPEM("kueue-metrics")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		return fmt.Errorf("kueue: Kueue v0.17 reads its metrics certificate from %s when internalCertManagement is off; create tls.crt and tls.key there: %w", kueueMetricsCertDir, err)
	}
	// Written aside and renamed, so a concurrent run never reads half a file.
	for path, data := range map[string][]byte{key: keyPEM, crt: certPEM} {
		tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

// RegisterKueueWebhooks registers the webhooks of Kueue's own API
// (config/components/webhook/manifests.yaml of the pinned module, those
// whose rules are all kueue.x-k8s.io: Workload, ClusterQueue,
// ResourceFlavor, Cohort defaulting and validation) at Kueue's loopback
// webhook server. The job-integration webhooks (pods, Jobs, other
// operators' kinds) are left out: no integration here needs them, and a
// pod webhook would sit in front of every pod the suite creates.
func (c *Cluster) RegisterKueueWebhooks(ctx context.Context, port int, caPEM []byte) error {
	mod, err := c.toolModuleDir(ctx, "kueue", "sigs.k8s.io/kueue")
	if err != nil {
		return err
	}
	src := filepath.Join(mod, "config", "components", "webhook", "manifests.yaml")
	objs, err := localcluster.ReadObjects(src)
	if err != nil {
		return err
	}
	for _, o := range objs {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		var kept []any
		for _, h := range hooks {
			hook, _ := h.(map[string]any)
			if !onlyKueueAPI(hook) {
				continue
			}
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			hook["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, path),
				"caBundle": caPEM,
			}
			kept = append(kept, hook)
		}
		if len(kept) == 0 {
			continue
		}
		o.SetName("kueue-" + o.GetName())
		if err := unstructured.SetNestedSlice(o.Object, toJSONSlice(kept), "webhooks"); err != nil {
			return err
		}
		if err := c.Apply(ctx, o); err != nil {
			return fmt.Errorf("registering Kueue's webhooks: %w", err)
		}
	}
	return nil
}

// onlyKueueAPI reports whether every rule of a webhook is on kueue.x-k8s.io.
func onlyKueueAPI(hook map[string]any) bool {
	rules, _, _ := unstructured.NestedSlice(hook, "rules")
	if len(rules) == 0 {
		return false
	}
	for _, r := range rules {
		groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups")
		if len(groups) != 1 || groups[0] != "kueue.x-k8s.io" {
			return false
		}
	}
	return true
}

// toJSONSlice makes byte slices (the CA) strings, as unstructured content
// must be JSON-compatible.
func toJSONSlice(hooks []any) []any {
	for _, h := range hooks {
		cc := h.(map[string]any)["clientConfig"].(map[string]any)
		if b, ok := cc["caBundle"].([]byte); ok {
			cc["caBundle"] = base64.StdEncoding.EncodeToString(b)
		}
	}
	return hooks
}

// StartKueue installs Kueue (InstallKueue), starts its controller-manager
// and, once it is ready, registers its webhooks.
func (c *Cluster) StartKueue(ctx context.Context) (*localcluster.Process, error) {
	if err := c.InstallKueue(ctx); err != nil {
		return nil, err
	}
	comp, port, ca, err := c.KueueComponent()
	if err != nil {
		return nil, err
	}
	p, err := c.StartComponent(ctx, comp)
	if err != nil {
		return nil, err
	}
	return p, c.RegisterKueueWebhooks(ctx, port, ca)
}
