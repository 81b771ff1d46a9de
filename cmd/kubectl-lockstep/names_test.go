package main

import (
	"testing"

	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
)

// TestPodGroupResourceMatchesItsOwner guards the group and version
// podGroupsResource repeats from scheduler-plugins.
func TestPodGroupResourceMatchesItsOwner(t *testing.T) {
	if got, want := podGroupsResource().GroupVersion().String(), schedv1alpha1.SchemeGroupVersion.String(); got != want {
		t.Errorf("kubectl-lockstep reads PodGroups as %q, scheduler-plugins serves %q", got, want)
	}
}
