package topologyplacement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/gangmanager"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestPendingMember decides when a drain is held for nobody: a suspended
// or evicted job's pods are deleted, and once no pod of the gang's size
// class waits to be scheduled its drain is released at once.
func TestPendingMember(t *testing.T) {
	member := func(name string, gpus int64, node string, deleting bool) *v1.Pod {
		pod := utiltesting.MakePod(name, "ns").GPUs(gpus).PodGroup("job").Obj()
		pod.Spec.NodeName = node
		if deleting {
			pod.DeletionTimestamp = &metav1.Time{}
		}
		return pod
	}
	const key = "ns/job#8"
	tests := []struct {
		name string
		pods []*v1.Pod
		want bool
	}{
		{name: "an unbound member waits", pods: []*v1.Pod{member("w-0", 8, "", false)}, want: true},
		{name: "no pod left (suspended, pods deleted)"},
		{name: "the unbound members are being deleted", pods: []*v1.Pod{member("w-0", 8, "", true), member("w-1", 8, "", true)}},
		{name: "only bound members", pods: []*v1.Pod{member("w-0", 8, "n1", false)}},
		{name: "only another size class waits", pods: []*v1.Pod{member("chief", 4, "", false)}},
	}
	p, _ := newTestPlugin(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gangmanager.PendingMember(tc.pods, key, p.planKey)); diff != "" {
				t.Errorf("pendingMember (-want,+got):\n%s", diff)
			}
		})
	}
}
