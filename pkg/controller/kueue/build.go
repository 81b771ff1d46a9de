package kueue

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Priority is a job's resolved priority: the PriorityClass its
// schedulingPolicy names and that class's value.
type Priority struct {
	ClassName string
	Value     int32
}

// PodSetName is the pod set of a replica role: the role in lower case, as
// the pods' lockstep.dev/replica-type label has it.
func PodSetName(role v1alpha1.ReplicaType) string { return strings.ToLower(string(role)) }

// Elastic reports whether a job's Workloads are slices (Kueue's
// ElasticJobsViaWorkloadSlices): the job has an elasticPolicy, so its
// Worker count is resized in place, through the /scale subresource, while
// it runs.
func Elastic(job *v1alpha1.TrainingJob) bool { return job.Spec.ElasticPolicy != nil }

// ElasticPodSet is the pod set whose count an elastic job resizes: the
// Workers, the role its /scale subresource writes.
var ElasticPodSet = PodSetName(v1alpha1.ReplicaWorker)

// WantedWorkload is the Workload a job queued in queue wants: one pod set
// per role with replicas (count, the role's template), the queue, and the
// priority when the job has one. Its name and lockstep.dev/spec-hash
// annotation carry the hash of that spec, so a job whose spec changed gets
// a new Workload while the stale one is deleted.
//
// An elastic job's hash leaves the Worker count out: a resize is not a new
// spec but a new size of the same one, which Decide carries to Kueue as a
// slice (scale-down in place, scale-up by a replacement slice) instead of
// deleting the admitted Workload under running pods. Its Workloads are
// marked as slices and named after the job's generation too, since each
// resize upwards needs a Workload of its own.
func WantedWorkload(job *v1alpha1.TrainingJob, queue string, prio *Priority) (*Workload, error) {
	spec := WorkloadSpec{QueueName: queue}
	for _, role := range slices.Sorted(maps.Keys(job.Spec.ReplicaSpecs)) {
		rs := job.Spec.ReplicaSpecs[role]
		n := rs.DesiredReplicas()
		if n == 0 {
			continue
		}
		spec.PodSets = append(spec.PodSets, PodSet{Name: PodSetName(role), Count: n, Template: *rs.Template.DeepCopy()})
	}
	if prio != nil {
		spec.PriorityClassRef = &PriorityClassRef{Group: "scheduling.k8s.io", Kind: "PriorityClass", Name: prio.ClassName}
		spec.Priority = ptr.To(prio.Value)
	}
	hashed := spec
	elastic := Elastic(job)
	if elastic {
		hashed.PodSets = slices.Clone(spec.PodSets)
		for i := range hashed.PodSets {
			if hashed.PodSets[i].Name == ElasticPodSet {
				hashed.PodSets[i].Count = 0
			}
		}
	}
	data, err := json.Marshal(hashed)
	if err != nil {
		return nil, fmt.Errorf("hashing the Workload of TrainingJob %s/%s: %w", job.Namespace, job.Name, err)
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:8])
	suffix := hash
	annotations := map[string]string{lockstep.AnnotationSpecHash: hash}
	if elastic {
		suffix = fmt.Sprintf("%s-%d", hash, job.Generation)
		annotations[lockstep.AnnotationKueueElasticJob] = "true"
	}
	return &Workload{
		ObjectMeta: metav1.ObjectMeta{
			Name:        workloadName(job.Name, suffix),
			Namespace:   job.Namespace,
			Labels:      map[string]string{lockstep.LabelJobName: job.Name, lockstep.LabelKueueJobUID: string(job.UID)},
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: spec,
	}, nil
}

// workloadName is trainingjob-<job>-<suffix>, the job's name cut so the
// whole stays a valid object name.
func workloadName(job, suffix string) string {
	const prefix, maxLen = "trainingjob-", 253
	if room := maxLen - len(prefix) - 1 - len(suffix); len(job) > room {
		job = strings.TrimRight(job[:room], "-.")
	}
	return prefix + job + "-" + suffix
}

// Counts is the pod count of each pod set of w.
func (w *Workload) Counts() map[string]int32 {
	out := make(map[string]int32, len(w.Spec.PodSets))
	for _, ps := range w.Spec.PodSets {
		out[ps.Name] = ps.Count
	}
	return out
}
