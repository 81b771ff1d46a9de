package framework

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// successRule says whether the pods show the job succeeded, and why.
type successRule func(pods Observed) (done bool, reason, message string)

// decide applies a framework's success rule, then looks for a pod that
// failed for good. Success is checked first: once the primary role has
// succeeded, pods failing as the job winds down (MPI workers losing their
// launcher) do not undo it.
func decide(roles []v1alpha1.ReplicaType, pods Observed, succeeded successRule) Outcome {
	if done, reason, msg := succeeded(pods); done {
		return Outcome{Result: Succeeded, Reason: reason, Message: msg}
	}
	for _, role := range roles {
		for i, phase := range pods[role] {
			if phase == corev1.PodFailed {
				return Outcome{
					Result:  Failed,
					Reason:  string(role) + "Failed",
					Message: fmt.Sprintf("%s %d failed and will not be retried", role, i),
				}
			}
		}
	}
	return Outcome{Result: Running, Reason: "Running"}
}

// allSucceeded: every pod of role succeeded, counted against the job's
// replicas so that pods not yet observed do not count as done.
func allSucceeded(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType) successRule {
	n := int(replicasOf(job, role))
	return func(pods Observed) (bool, string, string) {
		ps := pods[role]
		if n == 0 || len(ps) < n {
			return false, "", ""
		}
		for _, p := range ps[:n] {
			if p != corev1.PodSucceeded {
				return false, "", ""
			}
		}
		return true, string(role) + "Succeeded", fmt.Sprintf("all %d %s replicas succeeded", n, role)
	}
}

// indexSucceeded: pod index of role succeeded.
func indexSucceeded(role v1alpha1.ReplicaType, index int) successRule {
	return func(pods Observed) (bool, string, string) {
		ps := pods[role]
		if index >= len(ps) || ps[index] != corev1.PodSucceeded {
			return false, "", ""
		}
		return true, fmt.Sprintf("%s%dSucceeded", role, index), fmt.Sprintf("%s %d succeeded", role, index)
	}
}

// anySucceeded: some pod of role succeeded (elastic PyTorch: the group
// finished and torchrun exits everywhere).
func anySucceeded(role v1alpha1.ReplicaType) successRule {
	return func(pods Observed) (bool, string, string) {
		for i, p := range pods[role] {
			if p == corev1.PodSucceeded {
				return true, string(role) + "Succeeded", fmt.Sprintf("%s %d succeeded", role, i)
			}
		}
		return false, "", ""
	}
}

// workersRule is the rule for a job without a primary role: the framework's
// default, or every Worker when the job asks for AllWorkers.
func workersRule(job *v1alpha1.TrainingJob, frameworkDefault successRule) successRule {
	if job.Spec.SuccessPolicy == v1alpha1.SuccessPolicyAllWorkers {
		return allSucceeded(job, v1alpha1.ReplicaWorker)
	}
	return frameworkDefault
}
