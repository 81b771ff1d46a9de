package main

import (
	resourcev1 "k8s.io/api/resource/v1"
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

// The DRA objects NVIDIA's driver publishes GPUs in and pods claim them
// through are read through the dynamic client too, so that the plugin needs
// no client of the resource.k8s.io group.
func resourceSlicesResource() schema.GroupVersionResource {
	return resourcev1.SchemeGroupVersion.WithResource("resourceslices")
}

func resourceClaimsResource() schema.GroupVersionResource {
	return resourcev1.SchemeGroupVersion.WithResource("resourceclaims")
}
