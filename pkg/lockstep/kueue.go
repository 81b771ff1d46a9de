package lockstep

import (
	"fmt"
	"strings"
)

// Kueue's names that Lockstep reads or writes (sigs.k8s.io/kueue v0.17).
const (
	// LabelKueueQueueName on a TrainingJob names the Kueue LocalQueue it is
	// queued in: the controller holds the job, with no pods and no PodGroup,
	// until Kueue admits the Workload the controller makes for it.
	LabelKueueQueueName = "kueue.x-k8s.io/queue-name"

	// LabelKueueJobUID on a Workload is the UID of the job it stands for;
	// Kueue names the job by it in its events and messages.
	LabelKueueJobUID = "kueue.x-k8s.io/job-uid"

	// AnnotationKueueRequiredTopology and AnnotationKueuePreferredTopology
	// are Kueue TAS's constraint on a pod template (a TrainingJob replica
	// template, or the pods of another operator's gang): the value is a node
	// label key, which KueueTopologyConstraint maps to the level of the
	// topology configuration labelled by it.
	AnnotationKueueRequiredTopology  = "kueue.x-k8s.io/podset-required-topology"
	AnnotationKueuePreferredTopology = "kueue.x-k8s.io/podset-preferred-topology"

	// KueueExternalFramework is TrainingJob as Kueue's Configuration names
	// it in integrations.externalFrameworks (Kind.version.group): Kueue then
	// accepts the Workloads TrainingJobs own.
	KueueExternalFramework = "TrainingJob.v1alpha1.lockstep.dev"

	// LabelHostname is the node label Kueue TAS names the host level by.
	LabelHostname = "kubernetes.io/hostname"

	// AnnotationKueueElasticJob ("true") marks a Workload as one slice of an
	// elastic job (Kueue's ElasticJobsViaWorkloadSlices feature gate): Kueue
	// then lets its pod counts shrink while admitted, and admits a
	// replacement slice for a larger size without stopping the first. The
	// controller sets it on the Workloads of TrainingJobs with an
	// elasticPolicy.
	AnnotationKueueElasticJob = "kueue.x-k8s.io/elastic-job"

	// AnnotationKueueSliceReplacementFor on a new slice is the namespace/name
	// of the admitted slice it replaces: Kueue admits it for the difference
	// only and finishes the old slice (reason WorkloadSliceReplaced) in the
	// same step.
	AnnotationKueueSliceReplacementFor = "kueue.x-k8s.io/workload-slice-replacement-for"

	// AnnotationKueueSliceName is the name of the first Workload of a slice
	// chain, carried by every slice of it.
	AnnotationKueueSliceName = "kueue.x-k8s.io/workload-slice-name"
)

// KueueTopologyConstraint reads Kueue TAS's topology annotations of a pod
// template and returns the equivalent Lockstep level and mode under cfg: the
// level whose node label is the annotation's value (kubernetes.io/hostname
// is the host level). ok is false when neither annotation is set. An error
// names the annotation and the valid label keys: a key no level is labelled
// by, or both annotations at once (Kueue refuses that too).
//
// Lockstep's own constraint (TrainingJob spec.topology, the PodGroup's
// lockstep.dev/topology-* annotations) wins where both are given: it names
// a level of Lockstep's configuration directly, and the API server has
// validated it; Kueue's annotation is the fallback for manifests written
// for Kueue TAS.
func KueueTopologyConstraint(annotations map[string]string, cfg TopologyConfig) (level string, mode ConstraintMode, ok bool, err error) {
	required, hasRequired := annotations[AnnotationKueueRequiredTopology]
	preferred, hasPreferred := annotations[AnnotationKueuePreferredTopology]
	switch {
	case hasRequired && hasPreferred:
		return "", "", true, fmt.Errorf("annotations %s and %s are both set: keep one",
			AnnotationKueueRequiredTopology, AnnotationKueuePreferredTopology)
	case hasRequired:
		level, err = levelForLabel(AnnotationKueueRequiredTopology, required, cfg)
		return level, Required, true, err
	case hasPreferred:
		level, err = levelForLabel(AnnotationKueuePreferredTopology, preferred, cfg)
		return level, Preferred, true, err
	}
	return "", "", false, nil
}

// levelForLabel finds the level labelled by key.
func levelForLabel(annotation, key string, cfg TopologyConfig) (string, error) {
	if key == LabelHostname {
		return LevelHost, nil
	}
	if l, ok := cfg.LevelLabelled(key); ok {
		return l.Name, nil
	}
	keys := []string{LabelHostname}
	for _, l := range cfg.Levels {
		keys = append(keys, l.LabelKey)
	}
	return "", fmt.Errorf("annotation %s=%q is no node label of a configured topology level; use one of %s",
		annotation, key, strings.Join(keys, ", "))
}
