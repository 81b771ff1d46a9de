package main

import (
	"testing"

	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/scheduler/topologyplacement"
)

// TestNamesMatchTheirOwners guards the names names.go repeats.
func TestNamesMatchTheirOwners(t *testing.T) {
	for _, c := range []struct{ ours, owners string }{
		{jobNameLabel, controller.JobNameLabel},
		{replicaTypeLabel, controller.ReplicaTypeLabel},
		{replicaIndexLabel, controller.ReplicaIndexLabel},
		{string(gpuResource), string(topologyplacement.GPUResource)},
		{topologyPlacementPlugin, topologyplacement.Name},
		{constraintLevelAnnotation, topologyplacement.LevelAnnotation},
		{constraintModeAnnotation, topologyplacement.ModeAnnotation},
		{placementDomainAnnotation, topologyplacement.PlacementDomainAnnotation},
		{placementLevelAnnotation, topologyplacement.PlacementLevelAnnotation},
		{placementEfficiencyAnnotation, topologyplacement.PlacementEfficiencyAnnotation},
		{podGroupsResource().GroupVersion().String(), schedv1alpha1.SchemeGroupVersion.String()},
	} {
		if c.ours != c.owners {
			t.Errorf("kubectl-lockstep has %q, its owner %q", c.ours, c.owners)
		}
	}
}
