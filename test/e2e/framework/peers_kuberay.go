package framework

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// KubeRay's ray-operator as a peer: the real binary (bin/ray-operator, built
// by hack/tools.sh from the pin in hack/tools/kuberay/go.mod) run as a
// process against the cluster, with its CRDs and RBAC read from the same
// module, so bumping the pin brings both along.

// KubeRayModule is the Go module of the operator.
const KubeRayModule = "github.com/ray-project/kuberay/ray-operator"

// KubeRayOperator is the operator's component and binary name.
const KubeRayOperator = "ray-operator"

// KubeRayBatchScheduler is the value of the operator's --batch-scheduler
// that creates scheduler-plugins PodGroups and gives pods the
// scheduler-plugins-scheduler name.
const KubeRayBatchScheduler = "scheduler-plugins"

// KubeRayIdentity is the operator's ServiceAccount, named as KubeRay's own
// config/rbac names it.
func KubeRayIdentity() localcluster.Identity {
	return localcluster.Identity{Namespace: "kuberay-system", Name: "kuberay-operator"}
}

// kubeRayPodGroupRole is the ClusterRole for the scheduler-plugins
// integration: the operator creates a PodGroup per gang-scheduled
// RayCluster and reads it through its cache. KubeRay's config/rbac lacks it;
// its Helm chart adds it when batchScheduler.name is scheduler-plugins.
const kubeRayPodGroupRole = "kuberay-operator-scheduler-plugins"

// InstallKubeRay installs the operator's CRDs (RayCluster, RayJob and
// RayService: it runs a controller for each, so all must exist) and its
// identity: the ServiceAccount, KubeRay's ClusterRole and the PodGroup
// access of the scheduler-plugins integration. It may be called again.
func (c *Cluster) InstallKubeRay(ctx context.Context) error {
	dir, err := c.toolModuleDir(ctx, "kuberay", KubeRayModule)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s/config/crd/bases", dir)
	}
	if err := c.ApplyCRDFiles(ctx, files, nil); err != nil {
		return err
	}
	return c.installKubeRayIdentity(ctx, dir)
}

func (c *Cluster) installKubeRayIdentity(ctx context.Context, moduleDir string) error {
	rolePath := filepath.Join(moduleDir, "config", "rbac", "role.yaml")
	roles, err := localcluster.ReadObjects(rolePath)
	if err != nil {
		return err
	}
	if len(roles) != 1 || roles[0].GetKind() != "ClusterRole" {
		return fmt.Errorf("%s: want one ClusterRole, got %d objects", rolePath, len(roles))
	}
	role := roles[0]
	id := KubeRayIdentity()
	subject := []any{id.Subject()}
	ns, sa := id.Objects()
	objs := []*unstructured.Unstructured{
		ns, sa,
		role,
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": role.GetName()},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.GetName()},
			"subjects": subject,
		}},
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
			"metadata": map[string]any{"name": kubeRayPodGroupRole},
			"rules": []any{map[string]any{
				"apiGroups": []any{"scheduling.x-k8s.io"},
				"resources": []any{"podgroups"},
				"verbs":     []any{"create", "delete", "get", "list", "update", "watch"},
			}},
		}},
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": kubeRayPodGroupRole},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": kubeRayPodGroupRole},
			"subjects": subject,
		}},
	}
	return c.Apply(ctx, objs...)
}

// KubeRayOperatorComponent describes the operator with batchScheduler as
// its --batch-scheduler ("" for none). With KubeRayBatchScheduler it
// creates a PodGroup for each RayCluster labelled
// ray.io/gang-scheduling-enabled and gives every pod it creates
// schedulerName scheduler-plugins-scheduler, which lockstep-scheduler
// serves. Leader election is off (one replica); its webhooks stay off (they
// are enabled only by ENABLE_WEBHOOKS=true).
func (c *Cluster) KubeRayOperatorComponent(batchScheduler string) (localcluster.Component, error) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return localcluster.Component{}, err
	}
	kubeconfig, err := c.IdentityKubeconfig(KubeRayIdentity())
	if err != nil {
		return localcluster.Component{}, err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		"--enable-leader-election=false",
		"--log-stdout-encoder=console",
	}
	if batchScheduler != "" {
		args = append(args, "--batch-scheduler="+batchScheduler)
	}
	return localcluster.Component{
		Name:      KubeRayOperator,
		Binary:    KubeRayOperator,
		Args:      args,
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]),
	}, nil
}
