package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

const (
	pending   = corev1.PodPending
	running   = corev1.PodRunning
	succeeded = corev1.PodSucceeded
	failed    = corev1.PodFailed
)

func TestOutcome(t *testing.T) {
	ddp := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).Role(v1alpha1.ReplicaWorker, 2, tpl("pytorch")).DefaultedObj()
	elastic := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 2, tpl("pytorch")).
		ElasticPolicy(v1alpha1.ElasticPolicy{}).DefaultedObj()
	tfWorkers := makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaWorker, 2, tpl("tensorflow"))
	tfChief := makeJob(v1alpha1.FrameworkTensorFlow).Role(v1alpha1.ReplicaChief, 1, tpl("tensorflow")).
		Role(v1alpha1.ReplicaPS, 1, tpl("tensorflow")).Role(v1alpha1.ReplicaWorker, 2, tpl("tensorflow")).DefaultedObj()
	mpi := mpiJob(2).DefaultedObj()
	paddle := makeJob(v1alpha1.FrameworkPaddle).Role(v1alpha1.ReplicaWorker, 2, tpl("paddle")).DefaultedObj()
	paddlePS := makeJob(v1alpha1.FrameworkPaddle).Role(v1alpha1.ReplicaMaster, 1, tpl("paddle")).Role(v1alpha1.ReplicaWorker, 2, tpl("paddle")).DefaultedObj()
	jax := makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 2, tpl("jax")).DefaultedObj()
	xgb := makeJob(v1alpha1.FrameworkXGBoost).Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).Role(v1alpha1.ReplicaWorker, 2, tpl("xgboost")).DefaultedObj()

	cases := []struct {
		name    string
		adapter Adapter
		job     *v1alpha1.TrainingJob
		pods    Observed
		want    Outcome
	}{
		{"pytorch starting", PyTorch{}, ddp, Observed{"Master": {pending}, "Worker": {pending, pending}},
			Outcome{Result: Running, Reason: "Running"}},
		{"pytorch master succeeded", PyTorch{}, ddp, Observed{"Master": {succeeded}, "Worker": {running, failed}},
			Outcome{Result: Succeeded, Reason: "MasterSucceeded", Message: "all 1 Master replicas succeeded"}},
		{"pytorch worker failed", PyTorch{}, ddp, Observed{"Master": {running}, "Worker": {running, failed}},
			Outcome{Result: Failed, Reason: "WorkerFailed", Message: "Worker 1 failed and will not be retried"}},
		{"pytorch workers done, master not yet", PyTorch{}, ddp, Observed{"Master": {running}, "Worker": {succeeded, succeeded}},
			Outcome{Result: Running, Reason: "Running"}},
		{"elastic: any worker", PyTorch{}, elastic, Observed{"Worker": {running, succeeded}},
			Outcome{Result: Succeeded, Reason: "WorkerSucceeded", Message: "Worker 1 succeeded"}},
		{"tensorflow: worker 0 is the chief", TensorFlow{}, tfWorkers.DefaultedObj(), Observed{"Worker": {succeeded, running}},
			Outcome{Result: Succeeded, Reason: "Worker0Succeeded", Message: "Worker 0 succeeded"}},
		{"tensorflow: worker 1 alone is not enough", TensorFlow{}, tfWorkers.DefaultedObj(), Observed{"Worker": {running, succeeded}},
			Outcome{Result: Running, Reason: "Running"}},
		{"tensorflow: AllWorkers waits for every worker", TensorFlow{},
			tfWorkers.Clone().With(func(j *v1alpha1.TrainingJob) { j.Spec.SuccessPolicy = v1alpha1.SuccessPolicyAllWorkers }).DefaultedObj(),
			Observed{"Worker": {succeeded, running}}, Outcome{Result: Running, Reason: "Running"}},
		{"tensorflow: chief succeeded, ps still serving", TensorFlow{}, tfChief, Observed{"Chief": {succeeded}, "PS": {running}, "Worker": {succeeded, succeeded}},
			Outcome{Result: Succeeded, Reason: "ChiefSucceeded", Message: "all 1 Chief replicas succeeded"}},
		{"tensorflow: ps failed", TensorFlow{}, tfChief, Observed{"Chief": {running}, "PS": {failed}, "Worker": {running, running}},
			Outcome{Result: Failed, Reason: "PSFailed", Message: "PS 0 failed and will not be retried"}},
		{"mpi: launcher succeeded, workers still in sshd", NewMPI(fixedRandom()), mpi, Observed{"Launcher": {succeeded}, "Worker": {running, running}},
			Outcome{Result: Succeeded, Reason: "LauncherSucceeded", Message: "all 1 Launcher replicas succeeded"}},
		{"mpi: launcher failed", NewMPI(fixedRandom()), mpi, Observed{"Launcher": {failed}, "Worker": {running, running}},
			Outcome{Result: Failed, Reason: "LauncherFailed", Message: "Launcher 0 failed and will not be retried"}},
		{"jax: every worker", JAX{}, jax, Observed{"Worker": {succeeded, succeeded}},
			Outcome{Result: Succeeded, Reason: "WorkerSucceeded", Message: "all 2 Worker replicas succeeded"}},
		{"jax: one worker is not enough", JAX{}, jax, Observed{"Worker": {succeeded, running}},
			Outcome{Result: Running, Reason: "Running"}},
		{"jax: a pod not yet observed is not done", JAX{}, jax, Observed{"Worker": {succeeded}},
			Outcome{Result: Running, Reason: "Running"}},
		{"xgboost: master", XGBoost{}, xgb, Observed{"Master": {succeeded}, "Worker": {running, running}},
			Outcome{Result: Succeeded, Reason: "MasterSucceeded", Message: "all 1 Master replicas succeeded"}},
		{"paddle collective: every worker", Paddle{}, paddle, Observed{"Worker": {succeeded, succeeded}},
			Outcome{Result: Succeeded, Reason: "WorkerSucceeded", Message: "all 2 Worker replicas succeeded"}},
		{"paddle parameter server: the master", Paddle{}, paddlePS, Observed{"Master": {succeeded}, "Worker": {succeeded, running}},
			Outcome{Result: Succeeded, Reason: "MasterSucceeded", Message: "all 1 Master replicas succeeded"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.adapter.Outcome(tc.job, tc.pods)); diff != "" {
				t.Errorf("Outcome (-want,+got):\n%s", diff)
			}
		})
	}
}
