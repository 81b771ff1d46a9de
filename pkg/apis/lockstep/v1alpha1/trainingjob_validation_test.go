package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func template(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}
}

func replicas(n int32) ReplicaSpec {
	return ReplicaSpec{Replicas: &n, Template: template("registry.example/train:v1")}
}

func newJob(f Framework, roles map[ReplicaType]ReplicaSpec) *TrainingJob {
	return &TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
		Spec:       TrainingJobSpec{Framework: f, ReplicaSpecs: roles},
	}
}

func validPyTorch() *TrainingJob {
	return newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(1), ReplicaWorker: replicas(3)})
}

// TestValidationRules runs every case through Validate and through the API
// server's schema and CEL validation of the generated CRD: the two must
// agree, and both must name the problem.
func TestValidationRules(t *testing.T) {
	h := loadCRD(t)
	cases := []struct {
		name string
		job  *TrainingJob
		// want is a substring of the error both validations report; empty
		// for a valid job. wantAPI overrides it for the API server when
		// the schema words it differently.
		want, wantAPI string
	}{
		{name: "pytorch master and workers", job: validPyTorch()},
		{
			name: "no pods at all",
			job:  newJob(FrameworkJAX, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(0)}),
			want: "the job has no pods: at least one role needs replicas of 1 or more",
		},
		{
			name: "restart backoff within bounds",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{BackoffLimit: ptr.To[int32](20), RestartBackoff: &RestartBackoff{
					InitialSeconds: ptr.To[int32](1), MaxSeconds: ptr.To[int32](60), ResetAfterSeconds: ptr.To[int32](120)}}
				return j
			}(),
		},
		{
			name: "restart backoff of zero seconds",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{RestartBackoff: &RestartBackoff{InitialSeconds: ptr.To[int32](0)}}
				return j
			}(),
			want: "initialSeconds", wantAPI: "should be greater than or equal to 1",
		},
		{
			name: "restart backoff starting above its cap",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{RestartBackoff: &RestartBackoff{InitialSeconds: ptr.To[int32](60), MaxSeconds: ptr.To[int32](30)}}
				return j
			}(),
			want: "initialSeconds must not exceed maxSeconds",
		},
		{
			name: "pytorch without master",
			job:  newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(2)}),
			want: "a PyTorch job needs a Master replica unless elasticPolicy is set",
		},
		{
			name: "pytorch elastic without master",
			job: func() *TrainingJob {
				j := newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(4)})
				j.Spec.ElasticPolicy = &ElasticPolicy{MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](4)}
				return j
			}(),
		},
		{
			name: "pytorch two masters",
			job:  newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(2), ReplicaWorker: replicas(1)}),
			want: "Master, Chief and Launcher run exactly one replica",
		},
		{
			name: "pytorch with a PS",
			job:  newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(1), ReplicaPS: replicas(1)}),
			want: "PS", wantAPI: "roles must be valid for the framework",
		},
		{
			name: "elastic min above max",
			job: func() *TrainingJob {
				j := newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(4)})
				j.Spec.ElasticPolicy = &ElasticPolicy{MinReplicas: ptr.To[int32](5), MaxReplicas: ptr.To[int32](4)}
				return j
			}(),
			want: "minReplicas must not exceed maxReplicas",
		},
		{
			name: "elastic workers below min",
			job: func() *TrainingJob {
				j := newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(1)})
				j.Spec.ElasticPolicy = &ElasticPolicy{MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](4)}
				return j
			}(),
			want: "an elastic job needs Worker replicas between elasticPolicy.minReplicas and elasticPolicy.maxReplicas",
		},
		{
			name: "elastic on tensorflow",
			job: func() *TrainingJob {
				j := newJob(FrameworkTensorFlow, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(2)})
				j.Spec.ElasticPolicy = &ElasticPolicy{}
				return j
			}(),
			want: "elasticPolicy applies to PyTorch jobs only",
		},
		{
			name: "minAvailable above total",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{SchedulingPolicy: &SchedulingPolicy{MinAvailable: ptr.To[int32](5)}}
				return j
			}(),
			want: "must not exceed the total number of replicas",
		},
		{
			name: "unreachableToleranceSeconds negative",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](-1)}
				return j
			}(),
			want: "unreachableToleranceSeconds",
		},
		{
			name: "unreachableToleranceSeconds above an hour",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](3601)}
				return j
			}(),
			want: "unreachableToleranceSeconds",
		},
		{
			name: "unreachableToleranceSeconds zero",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](0)}
				return j
			}(),
		},
		{
			name: "unreachableForceDeleteSeconds negative",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableForceDeleteSeconds: ptr.To[int32](-1)}
				return j
			}(),
			want: "unreachableForceDeleteSeconds",
		},
		{
			name: "unreachableForceDeleteSeconds above a week",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableForceDeleteSeconds: ptr.To(MaxUnreachableForceDeleteSeconds + 1)}
				return j
			}(),
			want: "unreachableForceDeleteSeconds",
		},
		{
			name: "unreachableForceDeleteSeconds zero (force-delete at once)",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableForceDeleteSeconds: ptr.To[int32](0)}
				return j
			}(),
		},
		{
			name: "unreachableToleranceSeconds an hour",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](3600)}
				return j
			}(),
		},
		{
			name: "minAvailable equal to total",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.RunPolicy = &RunPolicy{SchedulingPolicy: &SchedulingPolicy{MinAvailable: ptr.To[int32](4)}}
				return j
			}(),
		},
		{
			name: "tensorflow chief ps workers evaluator",
			job: newJob(FrameworkTensorFlow, map[ReplicaType]ReplicaSpec{
				ReplicaChief: replicas(1), ReplicaPS: replicas(2), ReplicaWorker: replicas(4), ReplicaEvaluator: replicas(1),
			}),
		},
		{
			name: "tensorflow chief and master",
			job:  newJob(FrameworkTensorFlow, map[ReplicaType]ReplicaSpec{ReplicaChief: replicas(1), ReplicaMaster: replicas(1)}),
			want: "Chief and Master are the same role in TensorFlow",
		},
		{
			name: "mpi launcher and workers",
			job:  newJob(FrameworkMPI, map[ReplicaType]ReplicaSpec{ReplicaLauncher: replicas(1), ReplicaWorker: replicas(8)}),
		},
		{
			name: "mpi without launcher",
			job:  newJob(FrameworkMPI, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(8)}),
			want: "an MPI job needs a Launcher replica",
		},
		{
			name: "mpi policy on pytorch",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.MPI = &MPIPolicy{}
				return j
			}(),
			want: "mpi applies to MPI jobs only",
		},
		{
			name: "xgboost without master",
			job:  newJob(FrameworkXGBoost, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(2)}),
			want: "an XGBoost job needs a Master replica",
		},
		{
			name: "paddle parameter servers",
			job:  newJob(FrameworkPaddle, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(2), ReplicaWorker: replicas(2)}),
		},
		{
			name: "jax with a master",
			job:  newJob(FrameworkJAX, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(1), ReplicaWorker: replicas(2)}),
			want: "Master", wantAPI: "roles must be valid for the framework",
		},
		{
			name: "nprocPerNode on jax",
			job: func() *TrainingJob {
				j := newJob(FrameworkJAX, map[ReplicaType]ReplicaSpec{ReplicaWorker: replicas(2)})
				j.Spec.NprocPerNode = ptr.To("8")
				return j
			}(),
			want: "nprocPerNode applies to PyTorch jobs only",
		},
		{
			name: "nprocPerNode not a count",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.NprocPerNode = ptr.To("eight")
				return j
			}(),
			want: "nprocPerNode", wantAPI: "should match",
		},
		{
			name: "retryable exit code out of range",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.FailurePolicy = &FailurePolicy{RetryableExitCodes: []int32{137, 300}}
				return j
			}(),
			want: "retryableExitCodes", wantAPI: "should be less than or equal to 255",
		},
		{
			name: "topology level with capitals",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.Topology = &TopologyConstraint{Level: "Leaf"}
				return j
			}(),
			want: "topology.level", wantAPI: "should match",
		},
		{
			name: "unknown computeDomain policy",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.Topology = &TopologyConstraint{Level: "clique", ComputeDomain: "Always"}
				return j
			}(),
			want: "topology.computeDomain", wantAPI: "supported values",
		},
		{
			name: "unknown gpuClaims policy",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.Topology = &TopologyConstraint{Level: "host", GPUClaims: "NVLink"}
				return j
			}(),
			want: "topology.gpuClaims", wantAPI: "supported values",
		},
		{
			name: "name too long for hostnames",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Name = "a-very-long-training-job-name-that-goes-on-and-on"
				return j
			}(),
			want: "pod hostnames <name>-<role>-<index> must fit in 63",
		},
		{
			name: "name starting with a digit",
			job: func() *TrainingJob {
				j := validPyTorch()
				j.Name = "7b-finetune"
				return j
			}(),
			want: "must be a DNS label",
		},
		{
			name: "no roles",
			job:  newJob(FrameworkJAX, map[ReplicaType]ReplicaSpec{}),
			want: "replicaSpecs", wantAPI: "should have at least 1 properties",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			goErrs := tc.job.Validate().ToAggregate()
			apiErrs := h.validate(toUnstructured(t, tc.job), nil).ToAggregate()
			wantAPI := tc.wantAPI
			if wantAPI == "" {
				wantAPI = tc.want
			}
			checkErr(t, "Validate", goErrs, tc.want)
			checkErr(t, "API server", apiErrs, wantAPI)
		})
	}
}

func checkErr(t *testing.T, who string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error: %v", who, err)
	case want != "" && err == nil:
		t.Errorf("%s: accepted, want an error containing %q", who, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not contain %q", who, err, want)
	}
}

func TestUpdateRules(t *testing.T) {
	h := loadCRD(t)
	suspended := func(j *TrainingJob) *TrainingJob {
		j.Spec.RunPolicy = &RunPolicy{Suspend: ptr.To(true)}
		return j
	}
	elastic := func(j *TrainingJob) *TrainingJob {
		j.Spec.ElasticPolicy = &ElasticPolicy{MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](8)}
		return j
	}
	withImage := func(j *TrainingJob, image string) *TrainingJob {
		w := j.Spec.ReplicaSpecs[ReplicaWorker]
		w.Template = template(image)
		j.Spec.ReplicaSpecs[ReplicaWorker] = w
		return j
	}
	cases := []struct {
		name     string
		old, new *TrainingJob
		want     string
	}{
		{
			name: "scale a running job's workers", old: validPyTorch(), new: func() *TrainingJob {
				j := validPyTorch()
				j.Spec.ReplicaSpecs[ReplicaWorker] = replicas(7)
				return j
			}(),
			want: "replicas can change only while the job is suspended (runPolicy.suspend), or for the Workers of an elastic job",
		},
		{name: "scale a suspended job's workers", old: suspended(validPyTorch()), new: func() *TrainingJob {
			j := suspended(validPyTorch())
			j.Spec.ReplicaSpecs[ReplicaWorker] = replicas(7)
			return j
		}()},
		{name: "scale an elastic job's workers", old: elastic(validPyTorch()), new: func() *TrainingJob {
			j := elastic(validPyTorch())
			j.Spec.ReplicaSpecs[ReplicaWorker] = replicas(7)
			return j
		}()},
		{
			name: "an elastic job's master is not elastic", old: elastic(validPyTorch()), new: func() *TrainingJob {
				j := elastic(validPyTorch())
				j.Spec.ReplicaSpecs[ReplicaMaster] = replicas(0)
				return j
			}(),
			want: "replicas can change only while the job is suspended",
		},
		{name: "suspend a running job", old: validPyTorch(), new: suspended(validPyTorch())},
		{
			name: "change framework", old: validPyTorch(),
			new:  func() *TrainingJob { j := validPyTorch(); j.Spec.Framework = FrameworkPaddle; return j }(),
			want: "framework is immutable",
		},
		{
			name: "change a running job's template", old: validPyTorch(), new: withImage(validPyTorch(), "registry.example/train:v2"),
			want: "roles and pod templates are immutable unless the job is suspended",
		},
		{
			name: "add a role to a running job", old: validPyTorch(),
			new: func() *TrainingJob {
				j := newJob(FrameworkTensorFlow, map[ReplicaType]ReplicaSpec{ReplicaMaster: replicas(1), ReplicaWorker: replicas(3), ReplicaPS: replicas(1)})
				j.Spec.Framework = FrameworkPyTorch
				return j
			}(),
			want: "roles and pod templates are immutable",
		},
		{
			name: "change a suspended job's template", old: suspended(validPyTorch()),
			new: withImage(suspended(validPyTorch()), "registry.example/train:v2"),
		},
		{
			name: "admit a suspended job with a new template", old: suspended(validPyTorch()),
			new: withImage(validPyTorch(), "registry.example/train:v2"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := toUnstructured(t, tc.old)
			h.admit(old)
			apiErrs := h.validate(toUnstructured(t, tc.new), old).ToAggregate()
			goErrs := tc.new.ValidateUpdate(tc.old).ToAggregate()
			checkErr(t, "ValidateUpdate", goErrs, tc.want)
			checkErr(t, "API server", apiErrs, tc.want)
		})
	}
}

func TestDefault(t *testing.T) {
	cases := []struct {
		name string
		job  *TrainingJob
		want TrainingJobSpec
	}{
		{
			name: "pytorch restart policies and run policy",
			job:  newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaMaster: {Template: template("t")}, ReplicaWorker: {Template: template("t")}}),
			want: TrainingJobSpec{
				Framework: FrameworkPyTorch,
				ReplicaSpecs: map[ReplicaType]ReplicaSpec{
					ReplicaMaster: {Replicas: ptr.To[int32](1), RestartPolicy: RestartOnFailure, Template: template("t")},
					ReplicaWorker: {Replicas: ptr.To[int32](1), RestartPolicy: RestartOnFailure, Template: template("t")},
				},
				RunPolicy: withRestartDefaults(&RunPolicy{CleanPodPolicy: ptr.To(CleanPodPolicyNone), Suspend: ptr.To(false)}),
			},
		},
		{
			name: "mpi launcher on failure, workers never, mpi policy",
			job:  newJob(FrameworkMPI, map[ReplicaType]ReplicaSpec{ReplicaLauncher: {Template: template("t")}, ReplicaWorker: replicas(2)}),
			want: TrainingJobSpec{
				Framework: FrameworkMPI,
				ReplicaSpecs: map[ReplicaType]ReplicaSpec{
					ReplicaLauncher: {Replicas: ptr.To[int32](1), RestartPolicy: RestartOnFailure, Template: template("t")},
					ReplicaWorker:   {Replicas: ptr.To[int32](2), RestartPolicy: RestartNever, Template: template("registry.example/train:v1")},
				},
				RunPolicy: withRestartDefaults(&RunPolicy{CleanPodPolicy: ptr.To(CleanPodPolicyNone), Suspend: ptr.To(false)}),
				MPI: &MPIPolicy{SlotsPerWorker: ptr.To[int32](1), SSHAuthMountPath: "/root/.ssh",
					Implementation: MPIImplementationOpenMPI, RunLauncherAsWorker: ptr.To(false)},
			},
		},
		{
			name: "elastic bounds from the workers",
			job: func() *TrainingJob {
				j := newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: {Replicas: ptr.To[int32](3), RestartPolicy: RestartExitCode, Template: template("t")}})
				j.Spec.ElasticPolicy = &ElasticPolicy{}
				j.Spec.Topology = &TopologyConstraint{Level: "leaf"}
				return j
			}(),
			want: TrainingJobSpec{
				Framework: FrameworkPyTorch,
				ReplicaSpecs: map[ReplicaType]ReplicaSpec{
					ReplicaWorker: {Replicas: ptr.To[int32](3), RestartPolicy: RestartExitCode, Template: template("t")},
				},
				RunPolicy:     withRestartDefaults(&RunPolicy{CleanPodPolicy: ptr.To(CleanPodPolicyNone), Suspend: ptr.To(false)}),
				ElasticPolicy: &ElasticPolicy{MinReplicas: ptr.To[int32](3), MaxReplicas: ptr.To[int32](3), RDZVBackend: ptr.To(RDZVBackendC10D)},
				Topology:      &TopologyConstraint{Level: "leaf", Mode: TopologyPreferred},
			},
		},
		{
			name: "elastic max copies min",
			job: func() *TrainingJob {
				j := newJob(FrameworkPyTorch, map[ReplicaType]ReplicaSpec{ReplicaWorker: {Replicas: ptr.To[int32](2), RestartPolicy: RestartNever, Template: template("t")}})
				j.Spec.ElasticPolicy = &ElasticPolicy{MinReplicas: ptr.To[int32](2), RDZVBackend: ptr.To(RDZVBackendETCD)}
				j.Spec.RunPolicy = &RunPolicy{CleanPodPolicy: ptr.To(CleanPodPolicyAll), Suspend: ptr.To(true)}
				return j
			}(),
			want: TrainingJobSpec{
				Framework: FrameworkPyTorch,
				ReplicaSpecs: map[ReplicaType]ReplicaSpec{
					ReplicaWorker: {Replicas: ptr.To[int32](2), RestartPolicy: RestartNever, Template: template("t")},
				},
				RunPolicy:     withRestartDefaults(&RunPolicy{CleanPodPolicy: ptr.To(CleanPodPolicyAll), Suspend: ptr.To(true)}),
				ElasticPolicy: &ElasticPolicy{MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](2), RDZVBackend: ptr.To(RDZVBackendETCD)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.Default()
			if diff := cmp.Diff(tc.want, tc.job.Spec); diff != "" {
				t.Errorf("Default (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestDefaultRestartPolicy(t *testing.T) {
	cases := []struct {
		f    Framework
		role ReplicaType
		want RestartPolicy
	}{
		{FrameworkPyTorch, ReplicaMaster, RestartOnFailure},
		{FrameworkPyTorch, ReplicaWorker, RestartOnFailure},
		{FrameworkPaddle, ReplicaWorker, RestartOnFailure},
		{FrameworkMPI, ReplicaLauncher, RestartOnFailure},
		{FrameworkMPI, ReplicaWorker, RestartNever},
		{FrameworkTensorFlow, ReplicaWorker, RestartNever},
		{FrameworkJAX, ReplicaWorker, RestartNever},
		{FrameworkXGBoost, ReplicaMaster, RestartNever},
	}
	for _, tc := range cases {
		if got := DefaultRestartPolicy(tc.f, tc.role); got != tc.want {
			t.Errorf("DefaultRestartPolicy(%s, %s) = %s, want %s", tc.f, tc.role, got, tc.want)
		}
	}
}

func TestIsRetryableExitCode(t *testing.T) {
	cases := []struct {
		name   string
		policy *FailurePolicy
		code   int32
		want   bool
	}{
		{"default: SIGKILL", nil, 137, true},
		{"default: SIGTERM", &FailurePolicy{}, 143, true},
		{"default: program error", nil, 1, false},
		{"listed", &FailurePolicy{RetryableExitCodes: []int32{3, 137}}, 3, true},
		{"not listed", &FailurePolicy{RetryableExitCodes: []int32{3}}, 137, false},
	}
	for _, tc := range cases {
		if got := tc.policy.IsRetryableExitCode(tc.code); got != tc.want {
			t.Errorf("%s: IsRetryableExitCode(%d) = %v, want %v", tc.name, tc.code, got, tc.want)
		}
	}
}

func TestTotalReplicas(t *testing.T) {
	j := newJob(FrameworkTensorFlow, map[ReplicaType]ReplicaSpec{ReplicaChief: {Template: template("t")}, ReplicaWorker: replicas(4), ReplicaPS: replicas(0)})
	if got := j.Spec.TotalReplicas(); got != 5 {
		t.Errorf("TotalReplicas = %d, want 5 (unset counts as 1)", got)
	}
}

// withRestartDefaults adds the restart and node-loss defaults Default
// fills to a run policy a test expects.
func withRestartDefaults(p *RunPolicy) *RunPolicy {
	p.BackoffLimit = ptr.To(DefaultBackoffLimit)
	p.UnreachableToleranceSeconds = ptr.To(DefaultUnreachableToleranceSeconds)
	p.UnreachableForceDeleteSeconds = ptr.To(DefaultUnreachableForceDeleteSeconds)
	p.RestartBackoff = &RestartBackoff{
		InitialSeconds:    ptr.To(DefaultRestartInitialSeconds),
		MaxSeconds:        ptr.To(DefaultRestartMaxSeconds),
		ResetAfterSeconds: ptr.To(DefaultRestartResetAfterSeconds),
	}
	return p
}
