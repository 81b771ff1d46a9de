package controller

import (
	"crypto/rand"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// BenchmarkDesiredPodNVLinkGang builds the pods of a `clique: Required`
// PyTorch gang of 1 Master and workers Workers (4 GPUs each), one pod per
// op, as ensurePods does when the gang is created or restarted: with a
// ComputeDomain each pod also decides the domain and claims its channel.
func BenchmarkDesiredPodNVLinkGang(b *testing.B) {
	for _, workers := range []int32{17, 1023} {
		b.Run(fmt.Sprintf("pods=%d", workers+1), func(b *testing.B) {
			r := &TrainingJobReconciler{Client: fake.NewClientBuilder().WithScheme(fakeScheme(b)).Build(), Registry: framework.NewBuiltinRegistry(rand.Reader),
				SchedulerName: lockstep.SchedulerName, ClusterDomain: DefaultClusterDomain, Topology: lockstep.DefaultTopologyConfig()}
			job := utiltesting.MakeTrainingJob("nvl", "ml").Framework(v1alpha1.FrameworkPyTorch).UID("uid").
				Role(v1alpha1.ReplicaMaster, 1, envtestTemplate(4)).Role(v1alpha1.ReplicaWorker, workers, envtestTemplate(4)).
				Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).DefaultedObj()
			a, err := r.Registry.For(job.Spec.Framework)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := r.desiredPod(job, a, v1alpha1.ReplicaWorker, int32(i)%workers, claimGPUs{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
