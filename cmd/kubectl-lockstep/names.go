package main

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Resources read through the dynamic client: the plugin has no typed
// clientset for our CRDs or for scheduler-plugins' PodGroup, whose API
// package would link controller-runtime into the plugin; names_test.go
// checks the PodGroup's group and version against it.
func trainingJobsResource() schema.GroupVersionResource {
	return v1alpha1.GroupVersion.WithResource("trainingjobs")
}

func nodeTopologiesResource() schema.GroupVersionResource {
	return v1alpha1.GroupVersion.WithResource("nodetopologies")
}

func podGroupsResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
}
