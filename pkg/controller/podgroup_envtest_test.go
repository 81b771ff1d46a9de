package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
)

// Upstream's PodGroup controller writes Failed over a running gang's
// PodGroup, as it does when it read the group and a failed member before a
// gang restart reset the group, and patched after (its patch takes no
// resourceVersion). It never reconciles a Failed group again, so the
// controller re-arms it: the move into Failed wakes the job, and the gang
// of the job has no failed member. The envtest harness runs no PodGroup
// controller, so the group stays Pending after that.
func TestEnvtestPodGroupRearmedUnderLiveGang(t *testing.T) {
	job, _, _ := runningGang(t, "rearm", 3, 0)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: job.Namespace, Name: job.Name}
	pg := &schedv1alpha1.PodGroup{}
	if err := harness.api.Get(ctx, key, pg); err != nil {
		t.Fatal(err)
	}
	waitForIdleController(t)
	patch := client.MergeFrom(pg.DeepCopy())
	pg.Status.Phase, pg.Status.Running, pg.Status.Failed = schedv1alpha1.PodGroupFailed, 3, 1
	if err := harness.api.Status().Patch(ctx, pg, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the PodGroup re-armed", func(ctx context.Context) (bool, string, error) {
		if err := harness.api.Get(ctx, key, pg); err != nil {
			return false, "", err
		}
		return pg.Status.Phase == schedv1alpha1.PodGroupPending && pg.Status.Failed == 0, string(pg.Status.Phase), nil
	})
}
