package controller

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// ManagerCache returns the cache and client options the controller's
// manager runs with, cmd/controller and the envtest tests alike.
//
// Only gang pods are cached (the PodGroup controller counts every gang's
// pods, ours or not), and only the Services and ConfigMaps the controller
// made: a cluster's own are none of its business. Secrets are never cached
// nor read: the MPI SSH key is create-only, and RBAC grants the controller
// nothing but create on Secrets (a Secret informer would need list and watch
// on every Secret in the cluster, as RBAC cannot select by label). A read of
// a Secret goes to the apiserver, where RBAC refuses it, instead of silently
// starting a cluster-wide Secret informer.
//
// Unstructured objects are cached too: Kueue's Workloads, read as
// unstructured (pkg/controller/kueue), are listed on every reconcile of a
// queued job.
func ManagerCache() (cache.Options, client.Options) {
	gangPods := labels.NewSelector().Add(mustRequirement(schedv1alpha1.PodGroupLabel))
	ours := labels.NewSelector().Add(mustRequirement(lockstep.LabelJobName))
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:       {Label: gangPods},
			&corev1.Service{}:   {Label: ours},
			&corev1.ConfigMap{}: {Label: ours},
			// The elastic jobs' autoscalers.
			&autoscalingv2.HorizontalPodAutoscaler{}: {Label: ours},
			// The jobs' checkpoint reporter Roles and bindings
			// (checkpoint.go).
			&rbacv1.Role{}:        {Label: ours},
			&rbacv1.RoleBinding{}: {Label: ours},
		}},
		client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}, Unstructured: true}}
}

// mustRequirement is "key exists"; the keys are constants that are valid.
func mustRequirement(key string) labels.Requirement {
	r, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return *r
}
