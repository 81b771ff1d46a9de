// Package framework holds what differs between training frameworks: the
// roles of a job, the environment and files its pods need, and when it is
// finished. One small Adapter per framework; the TrainingJob reconciler does
// everything else (pods, PodGroup, Service, status, restarts) the same way
// for all of them.
//
// Adapters compute: a job in, values out. They take no client, context or
// clock, so they are tested with table tests and never need a cluster. The
// one input besides the job is the MPI adapter's source of randomness for
// SSH keys, which tests fix.
//
// The environment is Kubeflow training-operator's (and mpi-operator's for
// MPI), variable for variable, so training scripts written for Kubeflow run
// unchanged. One thing differs on purpose: Kubeflow gives every pod its own
// Service, so it can address a pod by its bare name (<job>-master-0);
// Lockstep has one headless Service per job, the pods' subdomain, and
// addresses pods by <pod>.<job>.<namespace>.svc (PodAddress). Scripts read
// the address from the environment, so they do not notice.
package framework

import (
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// Adapter is the behaviour of one training framework.
//
// Every method is a function of its arguments, except that AuxObjects may
// read the adapter's source of randomness (the MPI SSH key), so two calls
// can return different keys; the reconciler creates that Secret once and
// never compares it. The job passed in has been defaulted
// (TrainingJob.Default) and validated; adapters do not modify it.
type Adapter interface {
	// Framework is the framework this adapter implements.
	Framework() v1alpha1.Framework

	// Roles lists the roles the framework accepts in the order the
	// reconciler should create their pods: roles that others connect to
	// come first (Master before Worker; MPI's Launcher after its Workers).
	Roles() []v1alpha1.ReplicaType

	// PodTemplate returns the template of pod index of role: a copy of the
	// role's template made resolvable (hostname PodName, subdomain
	// ServiceName) and given the framework's environment, ports, volumes and
	// default command. Labels, owner, scheduler name and restart policy are
	// the reconciler's to add.
	PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error)

	// AuxObjects returns what the job needs besides its pods, PodGroup and
	// Service (MPI: the hostfile ConfigMap and the SSH key Secret), named
	// and namespaced; the reconciler adds owner references and applies them.
	AuxObjects(job *v1alpha1.TrainingJob) ([]AuxObject, error)

	// Outcome decides from the phases of the job's pods whether it has
	// succeeded, failed or runs on.
	Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome

	// DefaultRestartScope is what a retry restarts when the job's
	// failurePolicy does not say: Gang where the framework's collectives
	// cannot survive losing a member.
	DefaultRestartScope() v1alpha1.RestartScope

	// Rank returns pod index of role's rank in the job's collective, the
	// one its environment gives it (RANK, its hostfile line, its TF_CONFIG
	// task among chief and workers, PROCESS_ID), and false for a pod that
	// is no rank (a parameter server, an evaluator, an MPI launcher that
	// runs no ranks) or whose rank the framework assigns at run time
	// (torchrun's elastic rendezvous). Ranks of one job are 0 to n-1, each
	// once, and rank 0 is the pod the others rendezvous at. The reconciler
	// writes it as lockstep.dev/rank, and the scheduler places rank r on
	// the r-th slot of the gang's plan in topology order, so the static
	// environment follows the topology.
	Rank(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool)
}

// AuxObject is an object a job needs besides its pods.
type AuxObject struct {
	Object client.Object
	// CreateOnly marks an object the reconciler creates once and never
	// updates. The MPI SSH key is one: every AuxObjects call generates a
	// new key, and pods already running hold the first.
	CreateOnly bool
}

// Observed is what the reconciler saw of a job's pods: for each role, the
// phase of the pod at each index. A missing pod, or one the reconciler is
// restarting, is PodPending; PodFailed means failed for good (no retry
// left under the restart and failure policies).
type Observed map[v1alpha1.ReplicaType][]corev1.PodPhase

// Result is where a job stands.
type Result string

const (
	Running   Result = "Running"
	Succeeded Result = "Succeeded"
	Failed    Result = "Failed"
)

// Outcome is an adapter's verdict on a job.
type Outcome struct {
	Result Result
	// Reason is a CamelCase reason for the job's condition, Message a
	// sentence for people.
	Reason, Message string
}

// EffectiveRestartScope is the restart scope a job runs under: its
// failurePolicy's, or the framework's default.
func EffectiveRestartScope(a Adapter, job *v1alpha1.TrainingJob) v1alpha1.RestartScope {
	if fp := job.Spec.FailurePolicy; fp != nil && fp.Restart != "" {
		return fp.Restart
	}
	return a.DefaultRestartScope()
}

// Registry holds the adapters by framework. Adapters are registered
// explicitly (Register or NewBuiltinRegistry); nothing registers itself.
type Registry struct {
	adapters map[v1alpha1.Framework]Adapter
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{adapters: map[v1alpha1.Framework]Adapter{}}
}

// NewBuiltinRegistry returns a registry of the six built-in adapters.
// random feeds the MPI adapter's SSH keys: crypto/rand.Reader in production.
func NewBuiltinRegistry(random io.Reader) *Registry {
	r := NewRegistry()
	for _, a := range []Adapter{PyTorch{}, TensorFlow{}, NewMPI(random), JAX{}, XGBoost{}, Paddle{}} {
		if err := r.Register(a); err != nil {
			panic(err) // the list above names each framework once
		}
	}
	return r
}

// Register adds an adapter. A framework is registered once.
func (r *Registry) Register(a Adapter) error {
	f := a.Framework()
	if _, dup := r.adapters[f]; dup {
		return fmt.Errorf("framework %s is already registered", f)
	}
	r.adapters[f] = a
	return nil
}

// For returns the adapter of framework f.
func (r *Registry) For(f v1alpha1.Framework) (Adapter, error) {
	a, ok := r.adapters[f]
	if !ok {
		return nil, fmt.Errorf("no adapter for framework %q", f)
	}
	return a, nil
}

// Frameworks lists the registered frameworks, sorted.
func (r *Registry) Frameworks() []v1alpha1.Framework {
	fs := make([]v1alpha1.Framework, 0, len(r.adapters))
	for f := range r.adapters {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	return fs
}
