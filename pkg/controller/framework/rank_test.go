package framework

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// ranks returns "role-index" → rank for every pod of the job that has one.
func ranks(a Adapter, job *v1alpha1.TrainingJob) map[string]int32 {
	out := map[string]int32{}
	for _, role := range a.Roles() {
		for i := range replicasOf(job, role) {
			if r, ok := a.Rank(job, role, i); ok {
				out[fmt.Sprintf("%s-%d", strings.ToLower(string(role)), i)] = r
			}
		}
	}
	return out
}

// TestRank pins each framework's rank space: which roles are ranks and in
// what order, rank 0 being the pod the others rendezvous at.
func TestRank(t *testing.T) {
	mpi := NewMPI(rand.Reader)
	for _, tc := range []struct {
		name string
		a    Adapter
		job  *v1alpha1.TrainingJob
		want map[string]int32
	}{{
		name: "PyTorch: Master 0, Worker i → i+1",
		a:    PyTorch{},
		job:  makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).DefaultedObj(),
		want: map[string]int32{"master-0": 0, "worker-0": 1, "worker-1": 2, "worker-2": 3},
	}, {
		name: "PyTorch elastic without a Master: the rendezvous ranks",
		a:    PyTorch{},
		job: makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).
			ElasticPolicy(v1alpha1.ElasticPolicy{}).DefaultedObj(),
		want: map[string]int32{},
	}, {
		name: "MPI: Workers in hostfile order, the Launcher no rank",
		a:    mpi,
		job:  makeJob(v1alpha1.FrameworkMPI).Role(v1alpha1.ReplicaLauncher, 1, tpl("mpi")).Role(v1alpha1.ReplicaWorker, 3, tpl("mpi")).DefaultedObj(),
		want: map[string]int32{"worker-0": 0, "worker-1": 1, "worker-2": 2},
	}, {
		name: "MPI: a Launcher that runs ranks heads the hostfile",
		a:    mpi,
		job: makeJob(v1alpha1.FrameworkMPI).Role(v1alpha1.ReplicaLauncher, 1, tpl("mpi")).Role(v1alpha1.ReplicaWorker, 2, tpl("mpi")).
			With(func(j *v1alpha1.TrainingJob) {
				j.Spec.MPI = &v1alpha1.MPIPolicy{RunLauncherAsWorker: ptr.To(true)}
			}).DefaultedObj(),
		want: map[string]int32{"launcher-0": 0, "worker-0": 1, "worker-1": 2},
	}, {
		name: "TensorFlow: Chief then Workers; PS and Evaluator no ranks",
		a:    TensorFlow{},
		job: makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaChief, 1, tpl("tensorflow")).Role(v1alpha1.ReplicaPS, 2, tpl("tensorflow")).
			Role(v1alpha1.ReplicaWorker, 2, tpl("tensorflow")).Role(v1alpha1.ReplicaEvaluator, 1, tpl("tensorflow")).DefaultedObj(),
		want: map[string]int32{"chief-0": 0, "worker-0": 1, "worker-1": 2},
	}, {
		name: "TensorFlow: Workers only, Worker 0 the implicit chief",
		a:    TensorFlow{},
		job:  makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaWorker, 3, tpl("tensorflow")).DefaultedObj(),
		want: map[string]int32{"worker-0": 0, "worker-1": 1, "worker-2": 2},
	}, {
		name: "TensorFlow: one pod trains alone",
		a:    TensorFlow{},
		job:  makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaWorker, 1, tpl("tensorflow")).DefaultedObj(),
		want: map[string]int32{},
	}, {
		name: "JAX: PROCESS_ID",
		a:    JAX{},
		job:  makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 3, tpl("jax")).DefaultedObj(),
		want: map[string]int32{"worker-0": 0, "worker-1": 1, "worker-2": 2},
	}, {
		name: "XGBoost: Master 0, Worker i → i+1",
		a:    XGBoost{},
		job:  makeJob(v1alpha1.FrameworkXGBoost).Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).Role(v1alpha1.ReplicaWorker, 2, tpl("xgboost")).DefaultedObj(),
		want: map[string]int32{"master-0": 0, "worker-0": 1, "worker-1": 2},
	}, {
		name: "Paddle parameter server: trainers ranked, servers not",
		a:    Paddle{},
		job:  makeJob(v1alpha1.FrameworkPaddle).Role(v1alpha1.ReplicaMaster, 1, tpl("paddle")).Role(v1alpha1.ReplicaWorker, 2, tpl("paddle")).DefaultedObj(),
		want: map[string]int32{"worker-0": 0, "worker-1": 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ranks(tc.a, tc.job)); diff != "" {
				t.Errorf("ranks (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRankMatchesEnvironment: the rank the reconciler annotates a pod with
// is the one its environment gives it, for the frameworks that write one.
func TestRankMatchesEnvironment(t *testing.T) {
	for _, tc := range []struct {
		a   Adapter
		job *v1alpha1.TrainingJob
		env string
	}{
		{PyTorch{}, makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).DefaultedObj(), "RANK"},
		{XGBoost{}, makeJob(v1alpha1.FrameworkXGBoost).Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).Role(v1alpha1.ReplicaWorker, 3, tpl("xgboost")).DefaultedObj(), "RANK"},
		{JAX{}, makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 3, tpl("jax")).DefaultedObj(), "PROCESS_ID"},
	} {
		t.Run(string(tc.a.Framework()), func(t *testing.T) {
			for _, role := range tc.a.Roles() {
				for i := range replicasOf(tc.job, role) {
					rank, ok := tc.a.Rank(tc.job, role, i)
					pod := podTemplate(t, tc.a, tc.job, role, i)
					var got string
					for _, e := range pod.Spec.Containers[0].Env {
						if e.Name == tc.env {
							got = e.Value
						}
					}
					if !ok || got != strconv.Itoa(int(rank)) {
						t.Errorf("%s %d: Rank %d, %v; %s=%q", role, i, rank, ok, tc.env, got)
					}
				}
			}
		})
	}
	t.Run("MPI hostfile", func(t *testing.T) {
		mpi := NewMPI(rand.Reader)
		job := makeJob(v1alpha1.FrameworkMPI).Role(v1alpha1.ReplicaLauncher, 1, tpl("mpi")).Role(v1alpha1.ReplicaWorker, 3, tpl("mpi")).
			With(func(j *v1alpha1.TrainingJob) { j.Spec.MPI = &v1alpha1.MPIPolicy{RunLauncherAsWorker: ptr.To(true)} }).DefaultedObj()
		lines := strings.Split(strings.TrimSpace(mpi.Hostfile(job)), "\n")
		for _, role := range mpi.Roles() {
			for i := range replicasOf(job, role) {
				rank, ok := mpi.Rank(job, role, i)
				if !ok || int(rank) >= len(lines) || !strings.HasPrefix(lines[rank], PodAddress(job, role, i, 0)+" ") {
					t.Errorf("%s %d: Rank %d, %v; hostfile %q", role, i, rank, ok, lines)
				}
			}
		}
	})
}
