package framework

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

// maxHostname is the longest pod hostname: a DNS label.
const maxHostname = 63

// NameIncarnation is the incarnation a job's new pods are named and
// addressed for: the job's restartCount under a gang restart scope, where
// every restart makes a new incarnation of the whole gang, and 0 under a
// pod scope, where a retried pod takes its predecessor's name once that is
// gone and no incarnation runs whole.
func NameIncarnation(a Adapter, job *v1alpha1.TrainingJob) int32 {
	if EffectiveRestartScope(a, job) != v1alpha1.RestartScopeGang {
		return 0
	}
	return job.Status.RestartCount
}

// PodName is the name, and hostname, of pod index of role in incarnation
// inc (NameIncarnation): <job>-<role in lower case>-<index>, as in Kubeflow,
// for incarnation 0, and <job>-<role>-r<inc>-<index> after a gang restart.
// The names of two incarnations differ, so a gang restarts on healthy
// nodes while pods of the one before are still Terminating on a node that
// stopped answering, and every address in the environment (MASTER_ADDR,
// TF_CONFIG, the MPI hostfile) names pods of the pod's own incarnation: a
// rank of incarnation N that still runs cannot reach, or join, incarnation
// N+1. The index stays last, for scripts that read it off the hostname.
// Names that would not fit a DNS label (a long job name, a high
// incarnation) keep their end and give up the end of the job's name for a
// hash of the whole, so they stay distinct.
func PodName(jobName string, role v1alpha1.ReplicaType, index, inc int32) string {
	tail := "-" + strings.ToLower(string(role))
	if inc > 0 {
		tail += "-r" + strconv.Itoa(int(inc))
	}
	tail += "-" + strconv.Itoa(int(index))
	name := jobName + tail
	if len(name) <= maxHostname {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	hash := fmt.Sprintf("-%08x", h.Sum32())
	keep := max(maxHostname-len(tail)-len(hash), 1)
	return jobName[:min(keep, len(jobName))] + hash + tail
}

// ServiceName is the job's headless Service, which is also every pod's
// subdomain: the job's name.
func ServiceName(jobName string) string { return jobName }

// PodAddress is the DNS name other pods reach pod index of role at:
// <pod>.<job>.<namespace>.svc, an A record of the job's headless Service
// that resolves from any namespace (the resolver's search path adds the
// cluster domain). TF_CONFIG and MPI hostfiles use it, as their Kubeflow
// operators write DNS names there.
func PodAddress(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index, inc int32) string {
	return PodName(job.Name, role, index, inc) + "." + ServiceName(job.Name) + "." + job.Namespace + ".svc"
}

// PodHost is the bare name Kubeflow's PyTorch, XGBoost, JAX and Paddle
// operators put in the environment (MASTER_ADDR=<job>-master-0), so scripts
// that print or compare it see what they always saw (in incarnation 0;
// later ones name their own pods, PodName). It resolves because
// the controller adds the job's Service domain to every pod's DNS search
// list (JobSearchDomain).
func PodHost(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index, inc int32) string {
	return PodName(job.Name, role, index, inc)
}

// JobSearchDomain is the DNS search domain under which a job's pods find
// each other by bare name: <job>.<namespace>.svc.<cluster domain>.
func JobSearchDomain(job *v1alpha1.TrainingJob, clusterDomain string) string {
	return ServiceName(job.Name) + "." + job.Namespace + ".svc." + clusterDomain
}

// NewHeadlessService returns the Service that gives the job's pods their DNS
// names. selector must match exactly the job's pods (the reconciler's
// job-name label): without a selector the EndpointSlice controller publishes
// no endpoints, and no <pod>.<service> name resolves. The Service is the
// pods' subdomain and each pod's hostname is its name (basePod), so every
// pod gets the A record <pod>.<job>.<namespace>.svc. It publishes pods
// before they are ready: rank 0 must resolve while the others start, or
// rendezvous never completes.
func NewHeadlessService(job *v1alpha1.TrainingJob, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName(job.Name), Namespace: job.Namespace},
		Spec: corev1.ServiceSpec{
			Selector:                 selector,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
		},
	}
}

// basePod copies the template of pod index of role and makes the pod
// resolvable through the job's Service under its name in incarnation inc
// (NameIncarnation).
func basePod(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index, inc int32) (*corev1.PodTemplateSpec, error) {
	spec, ok := job.Spec.ReplicaSpecs[role]
	if !ok {
		return nil, fmt.Errorf("job %s/%s has no %s replicas", job.Namespace, job.Name, role)
	}
	if n := spec.DesiredReplicas(); index < 0 || index >= n {
		return nil, fmt.Errorf("job %s/%s: %s index %d out of range [0, %d)", job.Namespace, job.Name, role, index, n)
	}
	if len(spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("job %s/%s: %s template has no containers", job.Namespace, job.Name, role)
	}
	pod := spec.Template.DeepCopy()
	pod.Spec.Hostname = PodName(job.Name, role, index, inc)
	pod.Spec.Subdomain = ServiceName(job.Name)
	return pod, nil
}

// mainContainer is the index of the container named name, or 0: Kubeflow's
// rule for the container that gets the framework's port.
func mainContainer(spec *corev1.PodSpec, name string) int {
	for i, c := range spec.Containers {
		if c.Name == name {
			return i
		}
	}
	return 0
}

// rolePort is the container port named portName on the main container of
// role's template, or def when the template names none (the port Kubeflow's
// defaulting would have added).
func rolePort(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, containerName, portName string, def int32) int32 {
	spec, ok := job.Spec.ReplicaSpecs[role]
	if !ok || len(spec.Template.Spec.Containers) == 0 {
		return def
	}
	c := spec.Template.Spec.Containers[mainContainer(&spec.Template.Spec, containerName)]
	for _, p := range c.Ports {
		if p.Name == portName {
			return p.ContainerPort
		}
	}
	return def
}

// ensurePort adds the framework's named port to the main container unless
// it declares it already.
func ensurePort(spec *corev1.PodSpec, containerName, portName string, port int32) {
	c := &spec.Containers[mainContainer(spec, containerName)]
	for _, p := range c.Ports {
		if p.Name == portName {
			return
		}
	}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP})
}

// setEnv sets vars on c. A variable the template already has is replaced
// where it stands, so the framework's value wins as in Kubeflow (which
// appends, and the last duplicate wins) without leaving duplicates.
func setEnv(c *corev1.Container, vars ...corev1.EnvVar) {
	for _, v := range vars {
		replaced := false
		for i := range c.Env {
			if c.Env[i].Name == v.Name {
				c.Env[i] = v
				replaced = true
				break
			}
		}
		if !replaced {
			c.Env = append(c.Env, v)
		}
	}
}

// setEnvAll sets vars on every container of spec, as Kubeflow does for
// PyTorch, JAX, XGBoost and Paddle.
func setEnvAll(spec *corev1.PodSpec, vars ...corev1.EnvVar) {
	for i := range spec.Containers {
		setEnv(&spec.Containers[i], vars...)
	}
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func itoa[T ~int32 | ~int64 | ~int](v T) string { return strconv.FormatInt(int64(v), 10) }

func replicasOf(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType) int32 {
	spec, ok := job.Spec.ReplicaSpecs[role]
	if !ok {
		return 0
	}
	return spec.DesiredReplicas()
}

// CheckpointReporterName names the Role and RoleBinding that let a job's
// pods report checkpoints on themselves (docs/controller.md,
// "Checkpoints").
func CheckpointReporterName(jobName string) string { return jobName + "-checkpoint-reporter" }
