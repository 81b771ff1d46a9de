package framework

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Kubeflow's PyTorchJob defaults: the container that gets the port, the
// port's name and number.
const (
	pytorchContainer = "pytorch"
	pytorchPortName  = "pytorchjob-port"
	pytorchPort      = 23456
)

// PyTorch runs torch.distributed jobs: a Master (rank 0) and Workers, or
// elastic Workers meeting through torchrun's rendezvous.
//
// Environment, on every container (training-operator v1.9
// pkg/controller.v1/pytorch: envvar.go, master.go, elastic.go):
//
//	PYTHONUNBUFFERED=1
//	with a Master:
//	  MASTER_PORT, PET_MASTER_PORT  the Master's pytorchjob-port (23456)
//	  MASTER_ADDR, PET_MASTER_ADDR  the Master's address
//	  WORLD_SIZE                    pods × nprocPerNode (× 1 unless an integer)
//	  RANK, PET_NODE_RANK           Master 0, Worker i → i+1
//	  PET_NPROC_PER_NODE            nprocPerNode, "auto" when unset
//	elastic:
//	  PET_RDZV_ENDPOINT   rdzvHost or Worker 0's address, ":", rdzvPort or Worker's pytorchjob-port
//	  PET_RDZV_BACKEND    rdzvBackend, c10d
//	  PET_NNODES          "minReplicas:maxReplicas"
//	  PET_RDZV_ID         RendezvousID: rdzvId (or the job's UID), unique to the incarnation
//	  PET_MAX_RESTARTS, PET_NPROC_PER_NODE, PET_RDZV_CONF (k=v,k=v), PET_STANDALONE when set
//	not elastic:
//	  PET_NNODES          pods
type PyTorch struct{}

var _ Adapter = PyTorch{}

func (PyTorch) Framework() v1alpha1.Framework { return v1alpha1.FrameworkPyTorch }

func (PyTorch) Roles() []v1alpha1.ReplicaType {
	return []v1alpha1.ReplicaType{v1alpha1.ReplicaMaster, v1alpha1.ReplicaWorker}
}

// DefaultRestartScope is Gang: NCCL communicators do not survive losing a
// rank, so restarting one pod leaves the others hanging in a collective.
func (PyTorch) DefaultRestartScope() v1alpha1.RestartScope { return v1alpha1.RestartScopeGang }

func (PyTorch) PodTemplate(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (*corev1.PodTemplateSpec, error) {
	inc := NameIncarnation(PyTorch{}, job)
	pod, err := basePod(job, role, index, inc)
	if err != nil {
		return nil, err
	}
	ensurePort(&pod.Spec, pytorchContainer, pytorchPortName, pytorchPort)
	setEnvAll(&pod.Spec, pytorchEnv(job, role, index, inc)...)
	return pod, nil
}

func pytorchEnv(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index, inc int32) []corev1.EnvVar {
	s := &job.Spec
	total := s.TotalReplicas()
	vars := []corev1.EnvVar{env("PYTHONUNBUFFERED", "1")}

	nproc := "auto"
	if s.NprocPerNode != nil {
		nproc = *s.NprocPerNode
	}
	if s.HasRole(v1alpha1.ReplicaMaster) {
		port := itoa(rolePort(job, v1alpha1.ReplicaMaster, pytorchContainer, pytorchPortName, pytorchPort))
		addr := PodHost(job, v1alpha1.ReplicaMaster, 0, inc)
		rank, _ := PyTorch{}.Rank(job, role, index)
		// WORLD_SIZE counts processes. "auto", "cpu" and "gpu" count as
		// one per pod, as in Kubeflow: torchrun recomputes it per process.
		perNode := int64(1)
		if n, err := strconv.ParseInt(nproc, 10, 32); err == nil {
			perNode = n
		}
		vars = append(vars,
			env("MASTER_PORT", port),
			env("PET_MASTER_PORT", port),
			env("MASTER_ADDR", addr),
			env("PET_MASTER_ADDR", addr),
			env("WORLD_SIZE", itoa(int64(total)*perNode)),
			env("RANK", itoa(rank)),
			env("PET_NPROC_PER_NODE", nproc),
			env("PET_NODE_RANK", itoa(rank)),
		)
	}

	e := s.ElasticPolicy
	if e == nil {
		return append(vars, env("PET_NNODES", itoa(total)))
	}
	host := PodHost(job, v1alpha1.ReplicaWorker, 0, inc)
	if e.RDZVHost != nil {
		host = *e.RDZVHost
	}
	port := rolePort(job, v1alpha1.ReplicaWorker, pytorchContainer, pytorchPortName, pytorchPort)
	if e.RDZVPort != nil {
		port = *e.RDZVPort
	}
	backend := v1alpha1.RDZVBackendC10D
	if e.RDZVBackend != nil {
		backend = *e.RDZVBackend
	}
	workers := replicasOf(job, v1alpha1.ReplicaWorker)
	minNodes, maxNodes := workers, workers
	if e.MinReplicas != nil {
		minNodes = *e.MinReplicas
	}
	if e.MaxReplicas != nil {
		maxNodes = *e.MaxReplicas
	}
	vars = append(vars,
		env("PET_RDZV_ENDPOINT", host+":"+itoa(port)),
		env("PET_RDZV_BACKEND", string(backend)),
		env("PET_NNODES", itoa(minNodes)+":"+itoa(maxNodes)),
	)
	if e.MaxRestarts != nil {
		vars = append(vars, env("PET_MAX_RESTARTS", itoa(*e.MaxRestarts)))
	}
	if s.NprocPerNode != nil {
		vars = append(vars, env("PET_NPROC_PER_NODE", nproc))
	}
	vars = append(vars, env(lockstep.EnvRendezvousID, RendezvousID(job, inc)))
	if len(e.RDZVConf) > 0 {
		pairs := make([]string, len(e.RDZVConf))
		for i, c := range e.RDZVConf {
			pairs[i] = c.Key + "=" + c.Value
		}
		vars = append(vars, env("PET_RDZV_CONF", strings.Join(pairs, ",")))
	}
	if e.Standalone != nil && *e.Standalone {
		vars = append(vars, env("PET_STANDALONE", ""))
	}
	return vars
}

// RendezvousID is an elastic job's PET_RDZV_ID in incarnation inc
// (NameIncarnation): spec.elasticPolicy.rdzvId, or the job's UID when it
// names none (Kubeflow leaves it unset, and torchrun then uses "none" for
// every job and every incarnation), with -r<inc> after a gang restart. The
// c10d rendezvous is keyed by it, so a rank of an earlier incarnation that
// still runs and reaches the endpoint cannot join the new group.
func RendezvousID(job *v1alpha1.TrainingJob, inc int32) string {
	id := string(job.UID)
	if e := job.Spec.ElasticPolicy; e != nil && e.RDZVID != nil {
		id = *e.RDZVID
	}
	if id == "" {
		id = job.Name
	}
	if inc > 0 {
		id += "-r" + itoa(inc)
	}
	return id
}

// Rank is RANK: Master 0, Worker i → i+1. Without a Master (elastic) the
// rendezvous assigns ranks and the pods have none.
func (PyTorch) Rank(job *v1alpha1.TrainingJob, role v1alpha1.ReplicaType, index int32) (int32, bool) {
	if !job.Spec.HasRole(v1alpha1.ReplicaMaster) {
		return 0, false
	}
	switch role {
	case v1alpha1.ReplicaMaster:
		return index, true
	case v1alpha1.ReplicaWorker:
		return index + 1, true
	}
	return 0, false
}

func (PyTorch) AuxObjects(*v1alpha1.TrainingJob) ([]AuxObject, error) { return nil, nil }

// Outcome: the Master decides; an elastic job without one has succeeded
// when any Worker has (torchrun exits on every node once the group is
// done), as in Kubeflow.
func (p PyTorch) Outcome(job *v1alpha1.TrainingJob, pods Observed) Outcome {
	rule := allSucceeded(job, v1alpha1.ReplicaMaster)
	if !job.Spec.HasRole(v1alpha1.ReplicaMaster) {
		rule = workersRule(job, anySucceeded(v1alpha1.ReplicaWorker))
	}
	return decide(p.Roles(), pods, rule)
}
