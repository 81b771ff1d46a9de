package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// MaxNameLength is the longest TrainingJob name: the longest hostname,
// <name>-evaluator-9999, must fit in a 63-character DNS label.
const MaxNameLength = 47

var (
	jobNameFormat       = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	nprocPerNodePattern = regexp.MustCompile(`^(auto|cpu|gpu|[1-9][0-9]{0,4})$`)
	topologyLevelFormat = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// Validate checks what the CRD's schema and CEL rules check on create, so
// Go callers (the converter, the controller, tests) get the same answers
// without an API server. Unset replicas count as 1, as after defaulting.
func (j *TrainingJob) Validate() field.ErrorList {
	var errs field.ErrorList
	if len(j.Name) > MaxNameLength || !jobNameFormat.MatchString(j.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), j.Name,
			"the name must be a DNS label of at most 47 characters starting with a letter: it names the job's Service, and pod hostnames <name>-<role>-<index> must fit in 63"))
	}
	s := &j.Spec
	specPath := field.NewPath("spec")
	rolesPath := specPath.Child("replicaSpecs")

	valid := FrameworkRoles(s.Framework)
	if valid == nil {
		errs = append(errs, field.NotSupported(specPath.Child("framework"), s.Framework, Frameworks))
	}
	switch n := len(s.ReplicaSpecs); {
	case n == 0:
		errs = append(errs, field.Required(rolesPath, "give at least one role"))
	case n > 5:
		errs = append(errs, field.TooMany(rolesPath, n, 5))
	}
	for _, role := range sortedRoles(s.ReplicaSpecs) {
		r := s.ReplicaSpecs[role]
		p := rolesPath.Key(string(role))
		if valid != nil && !slices.Contains(valid, role) {
			errs = append(errs, field.NotSupported(p, role, valid))
		}
		if n := r.DesiredReplicas(); n < 0 || n > 10000 {
			errs = append(errs, field.Invalid(p.Child("replicas"), n, "must be between 0 and 10000"))
		}
		if (role == ReplicaMaster || role == ReplicaChief || role == ReplicaLauncher) &&
			s.Framework != FrameworkPaddle && r.DesiredReplicas() != 1 {
			errs = append(errs, field.Invalid(p.Child("replicas"), r.DesiredReplicas(), "Master, Chief and Launcher run exactly one replica"))
		}
		switch r.RestartPolicy {
		case "", RestartAlways, RestartOnFailure, RestartNever, RestartExitCode:
		default:
			errs = append(errs, field.NotSupported(p.Child("restartPolicy"), r.RestartPolicy,
				[]RestartPolicy{RestartAlways, RestartOnFailure, RestartNever, RestartExitCode}))
		}
		if len(r.Template.Spec.Containers) == 0 {
			errs = append(errs, field.Required(p.Child("template", "spec", "containers"), "give at least one container"))
		}
	}
	switch {
	case s.Framework == FrameworkPyTorch && s.ElasticPolicy == nil && !s.HasRole(ReplicaMaster):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaMaster)), "a PyTorch job needs a Master replica unless elasticPolicy is set"))
	case s.Framework == FrameworkXGBoost && !s.HasRole(ReplicaMaster):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaMaster)), "an XGBoost job needs a Master replica"))
	case s.Framework == FrameworkMPI && !s.HasRole(ReplicaLauncher):
		errs = append(errs, field.Required(rolesPath.Key(string(ReplicaLauncher)), "an MPI job needs a Launcher replica"))
	}
	if len(s.ReplicaSpecs) > 0 && s.TotalReplicas() < 1 {
		errs = append(errs, field.Invalid(rolesPath, s.TotalReplicas(), "the job has no pods: at least one role needs replicas of 1 or more"))
	}
	if s.HasRole(ReplicaChief) && s.HasRole(ReplicaMaster) {
		errs = append(errs, field.Invalid(rolesPath, "Chief, Master", "Chief and Master are the same role in TensorFlow; give one of them"))
	}

	errs = append(errs, s.RunPolicy.validate(specPath.Child("runPolicy"), s.TotalReplicas())...)

	if e := s.ElasticPolicy; e != nil {
		p := specPath.Child("elasticPolicy")
		if s.Framework != FrameworkPyTorch {
			errs = append(errs, field.Forbidden(p, "elasticPolicy applies to PyTorch jobs only"))
		}
		if e.MinReplicas != nil && e.MaxReplicas != nil && *e.MinReplicas > *e.MaxReplicas {
			errs = append(errs, field.Invalid(p.Child("minReplicas"), *e.MinReplicas, "minReplicas must not exceed maxReplicas"))
		}
		if v := e.MinReplicas; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("minReplicas"), *v, "must be at least 1"))
		}
		if v := e.MaxReplicas; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("maxReplicas"), *v, "must be at least 1"))
		}
		if w, ok := s.ReplicaSpecs[ReplicaWorker]; !ok {
			errs = append(errs, field.Required(rolesPath.Key(string(ReplicaWorker)), "an elastic job needs Workers"))
		} else if n := w.DesiredReplicas(); (e.MinReplicas != nil && n < *e.MinReplicas) || (e.MaxReplicas != nil && n > *e.MaxReplicas) {
			errs = append(errs, field.Invalid(rolesPath.Key(string(ReplicaWorker)).Child("replicas"), n,
				"an elastic job needs Worker replicas between elasticPolicy.minReplicas and elasticPolicy.maxReplicas"))
		}
		if e.RDZVPort != nil && (*e.RDZVPort < 1 || *e.RDZVPort > 65535) {
			errs = append(errs, field.Invalid(p.Child("rdzvPort"), *e.RDZVPort, "must be a port number, 1-65535"))
		}
		if e.RDZVBackend != nil && !slices.Contains([]RDZVBackend{RDZVBackendC10D, RDZVBackendETCD, RDZVBackendETCDV2}, *e.RDZVBackend) {
			errs = append(errs, field.NotSupported(p.Child("rdzvBackend"), *e.RDZVBackend, []RDZVBackend{RDZVBackendC10D, RDZVBackendETCD, RDZVBackendETCDV2}))
		}
		if e.MaxRestarts != nil && *e.MaxRestarts < 0 {
			errs = append(errs, field.Invalid(p.Child("maxRestarts"), *e.MaxRestarts, "must not be negative"))
		}
	}
	if s.NprocPerNode != nil {
		p := specPath.Child("nprocPerNode")
		if s.Framework != FrameworkPyTorch {
			errs = append(errs, field.Forbidden(p, "nprocPerNode applies to PyTorch jobs only"))
		}
		if !nprocPerNodePattern.MatchString(*s.NprocPerNode) {
			errs = append(errs, field.Invalid(p, *s.NprocPerNode, `must be "auto", "cpu", "gpu" or a positive integer`))
		}
	}
	if m := s.MPI; m != nil {
		p := specPath.Child("mpi")
		if s.Framework != FrameworkMPI {
			errs = append(errs, field.Forbidden(p, "mpi applies to MPI jobs only"))
		}
		if m.SlotsPerWorker != nil && *m.SlotsPerWorker < 1 {
			errs = append(errs, field.Invalid(p.Child("slotsPerWorker"), *m.SlotsPerWorker, "must be at least 1"))
		}
		switch m.Implementation {
		case "", MPIImplementationOpenMPI, MPIImplementationIntel, MPIImplementationMPICH:
		default:
			errs = append(errs, field.NotSupported(p.Child("implementation"), m.Implementation,
				[]MPIImplementation{MPIImplementationOpenMPI, MPIImplementationIntel, MPIImplementationMPICH}))
		}
	}
	switch s.SuccessPolicy {
	case "", SuccessPolicyDefault, SuccessPolicyAllWorkers:
	default:
		errs = append(errs, field.NotSupported(specPath.Child("successPolicy"), s.SuccessPolicy,
			[]SuccessPolicy{SuccessPolicyDefault, SuccessPolicyAllWorkers}))
	}
	if f := s.FailurePolicy; f != nil {
		p := specPath.Child("failurePolicy")
		switch f.Restart {
		case "", RestartScopePod, RestartScopeGang:
		default:
			errs = append(errs, field.NotSupported(p.Child("restart"), f.Restart, []RestartScope{RestartScopePod, RestartScopeGang}))
		}
		seen := map[int32]bool{}
		for i, c := range f.RetryableExitCodes {
			if c < 1 || c > 255 {
				errs = append(errs, field.Invalid(p.Child("retryableExitCodes").Index(i), c, "must be an exit code, 1-255"))
			}
			if seen[c] {
				errs = append(errs, field.Duplicate(p.Child("retryableExitCodes").Index(i), c))
			}
			seen[c] = true
		}
	}
	if t := s.Topology; t != nil {
		p := specPath.Child("topology")
		if len(t.Level) > 63 || !topologyLevelFormat.MatchString(t.Level) {
			errs = append(errs, field.Invalid(p.Child("level"), t.Level, "must be a level name: lower-case letters, digits and '-', at most 63"))
		}
		if t.Mode != "" && !lockstep.ConstraintMode(t.Mode).Valid() {
			errs = append(errs, field.NotSupported(p.Child("mode"), t.Mode, lockstep.ConstraintModes()))
		}
		switch t.ComputeDomain {
		case "", ComputeDomainAuto, ComputeDomainDisabled:
		default:
			errs = append(errs, field.NotSupported(p.Child("computeDomain"), t.ComputeDomain, []ComputeDomainPolicy{ComputeDomainAuto, ComputeDomainDisabled}))
		}
		switch t.GPUClaims {
		case "", GPUClaimsAuto, GPUClaimsAsWritten:
		default:
			errs = append(errs, field.NotSupported(p.Child("gpuClaims"), t.GPUClaims, []GPUClaimsPolicy{GPUClaimsAuto, GPUClaimsAsWritten}))
		}
	}
	return errs
}

func (r *RunPolicy) validate(p *field.Path, totalReplicas int32) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if r.CleanPodPolicy != nil {
		switch *r.CleanPodPolicy {
		case CleanPodPolicyAll, CleanPodPolicyRunning, CleanPodPolicyNone:
		default:
			errs = append(errs, field.NotSupported(p.Child("cleanPodPolicy"), *r.CleanPodPolicy,
				[]CleanPodPolicy{CleanPodPolicyAll, CleanPodPolicyRunning, CleanPodPolicyNone}))
		}
	}
	if v := r.TTLSecondsAfterFinished; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("ttlSecondsAfterFinished"), *v, "must not be negative"))
	}
	if v := r.ActiveDeadlineSeconds; v != nil && *v < 1 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *v, "must be at least 1"))
	}
	if v := r.BackoffLimit; v != nil && (*v < 0 || *v > 1000000) {
		errs = append(errs, field.Invalid(p.Child("backoffLimit"), *v, "must be between 0 and 1000000"))
	}
	if b := r.RestartBackoff; b != nil {
		p := p.Child("restartBackoff")
		for _, f := range []struct {
			name     string
			v        *int32
			min, max int32
		}{
			{"initialSeconds", b.InitialSeconds, 1, 3600},
			{"maxSeconds", b.MaxSeconds, 1, 86400},
			{"resetAfterSeconds", b.ResetAfterSeconds, 1, 86400},
		} {
			if f.v != nil && (*f.v < f.min || *f.v > f.max) {
				errs = append(errs, field.Invalid(p.Child(f.name), *f.v, fmt.Sprintf("must be between %d and %d", f.min, f.max)))
			}
		}
		if b.InitialSeconds != nil && b.MaxSeconds != nil && *b.InitialSeconds > *b.MaxSeconds {
			errs = append(errs, field.Invalid(p.Child("initialSeconds"), *b.InitialSeconds, "initialSeconds must not exceed maxSeconds"))
		}
	}
	if v := r.UnreachableToleranceSeconds; v != nil && (*v < 0 || *v > MaxUnreachableToleranceSeconds) {
		errs = append(errs, field.Invalid(p.Child("unreachableToleranceSeconds"), *v,
			fmt.Sprintf("must be between 0 and %d seconds (0 restarts as soon as the node is marked unreachable)", MaxUnreachableToleranceSeconds)))
	}
	if v := r.UnreachableForceDeleteSeconds; v != nil && (*v < 0 || *v > MaxUnreachableForceDeleteSeconds) {
		errs = append(errs, field.Invalid(p.Child("unreachableForceDeleteSeconds"), *v,
			fmt.Sprintf("must be between 0 and %d seconds (0 force-deletes the job's pods as soon as their node is unreachable)", MaxUnreachableForceDeleteSeconds)))
	}
	if sp := r.SchedulingPolicy; sp != nil {
		p := p.Child("schedulingPolicy")
		if v := sp.MinAvailable; v != nil {
			if *v < 1 {
				errs = append(errs, field.Invalid(p.Child("minAvailable"), *v, "must be at least 1"))
			} else if *v > totalReplicas {
				errs = append(errs, field.Invalid(p.Child("minAvailable"), *v,
					fmt.Sprintf("must not exceed the total number of replicas (%d)", totalReplicas)))
			}
		}
		if v := sp.ScheduleTimeoutSeconds; v != nil && *v < 1 {
			errs = append(errs, field.Invalid(p.Child("scheduleTimeoutSeconds"), *v, "must be at least 1"))
		}
	}
	return errs
}

// ValidateUpdate checks the transition rules of the CRD: framework is
// immutable, and roles and templates are unless old was suspended.
func (j *TrainingJob) ValidateUpdate(old *TrainingJob) field.ErrorList {
	errs := j.Validate()
	specPath := field.NewPath("spec")
	if j.Spec.Framework != old.Spec.Framework {
		errs = append(errs, field.Invalid(specPath.Child("framework"), j.Spec.Framework, "framework is immutable"))
	}
	if old.Spec.IsSuspended() {
		return errs
	}
	same := len(j.Spec.ReplicaSpecs) == len(old.Spec.ReplicaSpecs)
	for role, r := range j.Spec.ReplicaSpecs {
		o, ok := old.Spec.ReplicaSpecs[role]
		// Semantic equality treats nil and empty collections alike, as the
		// wire format the CEL rule compares does.
		same = same && ok && equality.Semantic.DeepEqual(r.Template, o.Template)
	}
	if !same {
		errs = append(errs, field.Forbidden(specPath.Child("replicaSpecs"),
			"roles and pod templates are immutable unless the job is suspended (runPolicy.suspend)"))
	}
	for role, r := range j.Spec.ReplicaSpecs {
		o, ok := old.Spec.ReplicaSpecs[role]
		if !ok || (j.Spec.ElasticPolicy != nil && role == ReplicaWorker) || r.DesiredReplicas() == o.DesiredReplicas() {
			continue
		}
		errs = append(errs, field.Forbidden(specPath.Child("replicaSpecs"),
			"replicas can change only while the job is suspended (runPolicy.suspend), or for the Workers of an elastic job: the running pods were started with the old world size; suspend the job, change replicas, then resume it"))
		break
	}
	return errs
}

func sortedRoles(m map[ReplicaType]ReplicaSpec) []ReplicaType {
	roles := make([]ReplicaType, 0, len(m))
	for r := range m {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	return roles
}
