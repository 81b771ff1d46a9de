package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Names owned by the controller, the scheduler plugin and scheduler-plugins.
// They are repeated here rather than imported because importing those
// packages links the scheduler and controller-runtime into the plugin
// (a binary eight times larger); names_test.go checks they match.
const (
	jobNameLabel      = "lockstep.dev/job-name"
	replicaTypeLabel  = "lockstep.dev/replica-type"
	replicaIndexLabel = "lockstep.dev/replica-index"

	gpuResource corev1.ResourceName = "nvidia.com/gpu"

	topologyPlacementPlugin       = "TopologyPlacement"
	constraintLevelAnnotation     = "lockstep.dev/topology-level"
	constraintModeAnnotation      = "lockstep.dev/topology-mode"
	placementDomainAnnotation     = "lockstep.dev/placement-domain"
	placementLevelAnnotation      = "lockstep.dev/placement-level"
	placementEfficiencyAnnotation = "lockstep.dev/placement-efficiency"
)

// Resources read through the dynamic client: the plugin has no typed
// clientset for our CRDs or for scheduler-plugins' PodGroup.
func trainingJobsResource() schema.GroupVersionResource {
	return v1alpha1.GroupVersion.WithResource("trainingjobs")
}

func nodeTopologiesResource() schema.GroupVersionResource {
	return v1alpha1.GroupVersion.WithResource("nodetopologies")
}

func podGroupsResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
}
