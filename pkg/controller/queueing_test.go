package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestLimitToAdmitted: a role runs at most what Kueue admitted of it, never
// more than it asks for, and a role Kueue said nothing of is left alone.
func TestLimitToAdmitted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed map[string]int32
		want    map[v1alpha1.ReplicaType]int32
	}{
		{name: "scale-up pending: Workers held at the admitted size", allowed: map[string]int32{"master": 1, "worker": 2},
			want: map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 2}},
		{name: "admitted whole", allowed: map[string]int32{"master": 1, "worker": 4},
			want: map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 4}},
		{name: "allowed above the spec: the spec wins", allowed: map[string]int32{"worker": 6},
			want: map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 4}},
		{name: "not elastic: no limit", allowed: nil,
			want: map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := utiltesting.MakeTrainingJob("", "").Replicas(v1alpha1.ReplicaMaster, 1).Replicas(v1alpha1.ReplicaWorker, 4).Obj()
			limitToAdmitted(job, tc.allowed)
			got := map[v1alpha1.ReplicaType]int32{}
			for role, rs := range job.Spec.ReplicaSpecs {
				got[role] = rs.DesiredReplicas()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replicas (-want,+got):\n%s", diff)
			}
		})
	}
}
