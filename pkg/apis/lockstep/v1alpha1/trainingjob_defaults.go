package v1alpha1

import (
	"k8s.io/utils/ptr"
)

// Default fills what the API server's schema defaults would (for objects
// built in Go: tests, the converter) and the defaults that depend on the
// framework, which a schema cannot express: restart policies and the
// elastic bounds. The controller calls it on its copy of every job, so
// behaviour never depends on whether a default was stored.
func (j *TrainingJob) Default() {
	s := &j.Spec
	for role, r := range s.ReplicaSpecs {
		if r.Replicas == nil {
			r.Replicas = ptr.To[int32](1)
		}
		if r.RestartPolicy == "" {
			r.RestartPolicy = DefaultRestartPolicy(s.Framework, role)
		}
		s.ReplicaSpecs[role] = r
	}
	if s.RunPolicy == nil {
		s.RunPolicy = &RunPolicy{}
	}
	if s.RunPolicy.CleanPodPolicy == nil {
		s.RunPolicy.CleanPodPolicy = ptr.To(CleanPodPolicyNone)
	}
	if s.RunPolicy.Suspend == nil {
		s.RunPolicy.Suspend = ptr.To(false)
	}
	if s.RunPolicy.BackoffLimit == nil {
		s.RunPolicy.BackoffLimit = ptr.To(DefaultBackoffLimit)
	}
	if s.RunPolicy.RestartBackoff == nil {
		s.RunPolicy.RestartBackoff = &RestartBackoff{}
	}
	if b := s.RunPolicy.RestartBackoff; b.InitialSeconds == nil {
		b.InitialSeconds = ptr.To(DefaultRestartInitialSeconds)
	}
	if b := s.RunPolicy.RestartBackoff; b.MaxSeconds == nil {
		b.MaxSeconds = ptr.To(max(DefaultRestartMaxSeconds, *b.InitialSeconds))
	}
	if b := s.RunPolicy.RestartBackoff; b.ResetAfterSeconds == nil {
		b.ResetAfterSeconds = ptr.To(DefaultRestartResetAfterSeconds)
	}
	if s.RunPolicy.UnreachableToleranceSeconds == nil {
		s.RunPolicy.UnreachableToleranceSeconds = ptr.To(DefaultUnreachableToleranceSeconds)
	}
	if s.RunPolicy.UnreachableForceDeleteSeconds == nil {
		s.RunPolicy.UnreachableForceDeleteSeconds = ptr.To(DefaultUnreachableForceDeleteSeconds)
	}
	if e := s.ElasticPolicy; e != nil {
		// Kubeflow's rule: a missing bound copies the other; with neither,
		// both are the Worker replicas.
		switch {
		case e.MinReplicas == nil && e.MaxReplicas == nil:
			if w, ok := s.ReplicaSpecs[ReplicaWorker]; ok {
				e.MinReplicas = ptr.To(w.DesiredReplicas())
				e.MaxReplicas = ptr.To(w.DesiredReplicas())
			}
		case e.MinReplicas == nil:
			e.MinReplicas = ptr.To(*e.MaxReplicas)
		case e.MaxReplicas == nil:
			e.MaxReplicas = ptr.To(*e.MinReplicas)
		}
		if e.RDZVBackend == nil {
			e.RDZVBackend = ptr.To(RDZVBackendC10D)
		}
	}
	if s.Framework == FrameworkMPI {
		if s.MPI == nil {
			s.MPI = &MPIPolicy{}
		}
		if s.MPI.SlotsPerWorker == nil {
			s.MPI.SlotsPerWorker = ptr.To[int32](1)
		}
		if s.MPI.SSHAuthMountPath == "" {
			s.MPI.SSHAuthMountPath = "/root/.ssh"
		}
		if s.MPI.Implementation == "" {
			s.MPI.Implementation = MPIImplementationOpenMPI
		}
		if s.MPI.RunLauncherAsWorker == nil {
			s.MPI.RunLauncherAsWorker = ptr.To(false)
		}
	}
	if s.Topology != nil && s.Topology.Mode == "" {
		s.Topology.Mode = TopologyPreferred
	}
}
