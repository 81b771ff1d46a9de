// Package lockstep is Lockstep's contract: the names every component agrees
// on (the GPU resource, the labels and annotations written and read, the
// topology levels and their order, the constraint modes) and the shape of
// the topology configuration. Each fact is declared here once; the
// scheduler, agent, controller, bench and kubectl plugin import it.
//
// It imports only the standard library, so the pure core (pkg/topology) can
// use it too. Reading and validating the configuration file, which needs a
// YAML decoder and Kubernetes name rules, is in pkg/lockstep/topologyconfig.
package lockstep

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// GPUResource is the extended resource the NVIDIA device plugin advertises.
// Untyped, so it converts to corev1.ResourceName where that is wanted.
const GPUResource = "nvidia.com/gpu"

// SchedulerName is the scheduler profile Lockstep's pods ask for.
const SchedulerName = "lockstep-scheduler"

// SchedulerPluginsSchedulerName is a second profile of lockstep-scheduler
// with SchedulerName's plugins and args: scheduler-plugins' default name for
// its second scheduler, which operators built for its Coscheduling put on
// their pods without a way to change it (KubeRay's scheduler-plugins
// integration). deploy/scheduler/config.yaml serves it.
const SchedulerPluginsSchedulerName = "scheduler-plugins-scheduler"

// TopologyPlacementPlugin is the scheduler plugin's name in a
// KubeSchedulerConfiguration.
const TopologyPlacementPlugin = "TopologyPlacement"

// Labels Lockstep writes.
const (
	// LabelJobName, LabelReplicaType and LabelReplicaIndex are on every pod
	// the controller creates: the TrainingJob, the replica role (lower case)
	// and the index within the role.
	LabelJobName      = "lockstep.dev/job-name"
	LabelReplicaType  = "lockstep.dev/replica-type"
	LabelReplicaIndex = "lockstep.dev/replica-index"
	// LabelIncarnation is the job's restart count when the pod was created:
	// after a gang restart, pods of an earlier incarnation are removed
	// before the new gang is created, whoever's event comes first.
	LabelIncarnation = "lockstep.dev/incarnation"
	// LabelSuspensions is the job's suspension count when the pod was
	// created: pods of a run that was suspended are waited for when the
	// job resumes, never counted as members lost from the new run.
	LabelSuspensions = "lockstep.dev/suspensions"

	// LabelProfile names a simulated node's hardware profile; LabelPool the
	// cluster-model pool it came from.
	LabelProfile = "lockstep.dev/profile"
	LabelPool    = "lockstep.dev/pool"

	// Node labels the topology agent owns. Everything else under
	// lockstep.dev/ on a node is left alone by it.
	LabelGPUProduct   = "lockstep.dev/gpu-product"
	LabelGPUCount     = "lockstep.dev/gpu-count"
	LabelNVLinkDomain = "lockstep.dev/nvlink-domain"
)

// Variables the controller sets on every container of a job's pods, unique
// to the pod's incarnation, which a template may not set (ReservedEnv).
const (
	// EnvIncarnation is the incarnation the pod was created under (the
	// job's restartCount, LabelIncarnation): trainers namespace what they
	// write to shared storage with it, so a rank of an earlier incarnation
	// that still runs on a partitioned node never writes over the new one.
	EnvIncarnation = "LOCKSTEP_INCARNATION"
	// EnvRendezvousID is torchrun's rendezvous ID (--rdzv-id), which the
	// controller makes unique to the incarnation for PyTorch jobs: a rank of
	// an earlier incarnation cannot join the new rendezvous.
	EnvRendezvousID = "PET_RDZV_ID"
)

// ReservedEnv are the variables a template may not set, with why.
var ReservedEnv = map[string]string{
	EnvIncarnation:  "is set by the controller to the pod's incarnation (the job's restartCount)",
	EnvRendezvousID: "is set by the controller, unique to each incarnation of the job; set spec.elasticPolicy.rdzvId to choose its prefix",
	EnvResumeFrom:   "is set by the controller to the job's last reported checkpoint (status.checkpoint.location)",
	EnvResumeStep:   "is set by the controller to the job's last reported checkpoint's step (status.checkpoint.step)",
}

// Namespace labels a cluster-admin sets; deploy/ reads them.
const (
	// LabelAllowPrivilegedTemplates "true" on a namespace lets its
	// TrainingJobs' templates, and the pods the controller makes from them,
	// be privileged or share the host (privileged containers, hostNetwork,
	// hostPID, hostIPC, hostPath volumes). deploy/default/tenant-policy.yaml
	// and controller-policy.yaml refuse them elsewhere.
	LabelAllowPrivilegedTemplates = "lockstep.dev/allow-privileged-templates"
	// LabelMetricsScraper "true" on a namespace lets its pods reach the
	// controller's and agent's metrics ports (deploy/'s NetworkPolicies);
	// they still need a token allowed get on /metrics.
	LabelMetricsScraper = "lockstep.dev/metrics-scraper"
)

// PodGroupLabel is the scheduler-plugins label naming a pod's gang
// (scheduling.x-k8s.io/pod-group); the controller sets it to the job's name.
const PodGroupLabel = "scheduling.x-k8s.io/pod-group"

// AgentNodeLabels are the node label keys the topology agent may write.
func AgentNodeLabels() []string {
	return []string{LabelGPUProduct, LabelGPUCount, LabelNVLinkDomain}
}

// Node labels others write that Lockstep reads. The tier keys and the
// accelerator key are NVIDIA topograph's; the GPU keys are GPU feature
// discovery's.
const (
	// LabelGPUClique is GPU feature discovery's "<cluster UUID>.<clique id>"
	// of the node's multi-node NVLink domain.
	LabelGPUClique = "nvidia.com/gpu.clique"
	// LabelAcceleratorDomain is topograph's NVLink domain label, an
	// alternative key for the clique level.
	LabelAcceleratorDomain = "accelerator.topograph.run/domain"
	// LabelFabricTier0 names the node's leaf switch, LabelFabricTier1 its
	// spine and LabelFabricTier2 its block (core or super-spine group).
	LabelFabricTier0 = "fabric.topograph.run/tier-0"
	LabelFabricTier1 = "fabric.topograph.run/tier-1"
	LabelFabricTier2 = "fabric.topograph.run/tier-2"

	LabelNVIDIAGPUProduct = "nvidia.com/gpu.product"
	LabelNVIDIAGPUCount   = "nvidia.com/gpu.count"
	LabelNVIDIAGPUMemory  = "nvidia.com/gpu.memory"
)

// Annotations.
const (
	// AnnotationTopologyLevel on a PodGroup names the widest level the gang
	// should fit in; AnnotationTopologyMode says Required or Preferred.
	AnnotationTopologyLevel = "lockstep.dev/topology-level"
	AnnotationTopologyMode  = "lockstep.dev/topology-mode"

	// AnnotationGPUs on a bound pod lists the GPU indices the scheduler
	// chose on its node ("0,1,5"); AnnotationDomain names the domain its
	// gang landed in (topology.Domain.DisplayID).
	AnnotationGPUs   = "lockstep.dev/gpus"
	AnnotationDomain = "lockstep.dev/domain"

	// AnnotationRank is a gang member's rank in its job's collective, a
	// decimal from 0. The controller sets it on the pods it creates to the
	// framework rank their environment carries (RANK, hostfile line,
	// TF_CONFIG task, PROCESS_ID); the scheduler places rank r on the r-th
	// slot of the gang's plan in topology order, so consecutive ranks share
	// the tightest domain, and writes it at bind: the same value for a pod
	// that carried one, its slot's place in topology order for a pod that
	// did not (other operators' pods read it through the downward API).
	AnnotationRank = "lockstep.dev/rank"

	// On a PodGroup once its gang is placed: the domain (its
	// topology.Domain.DisplayID, "spine=s1/leaf=l2"), its level, and the
	// placement's topology.Rating: the efficiency (FormatEfficiency, "0.973")
	// and the reason for it.
	AnnotationPlacementDomain     = "lockstep.dev/placement-domain"
	AnnotationPlacementLevel      = "lockstep.dev/placement-level"
	AnnotationPlacementEfficiency = "lockstep.dev/placement-efficiency"
	AnnotationPlacementReason     = "lockstep.dev/placement-reason"

	// AnnotationSpecHash on an object the controller emits is the hash of
	// the spec it was written from, so the controller updates it only when
	// the job wants something else.
	AnnotationSpecHash = "lockstep.dev/spec-hash"

	// AnnotationSimulatedRuntime on a running pod on a fake (KWOK) node
	// ends the pod with success that long after it was annotated or
	// started, whichever is later (deploy/kwok/stages.yaml).
	AnnotationSimulatedRuntime = "lockstep.dev/simulated-runtime"
	// AnnotationSimulatedExitCode beside AnnotationSimulatedRuntime makes
	// the pod fail with that exit code instead of succeeding, as a rank
	// whose script crashes on every start does.
	AnnotationSimulatedExitCode = "lockstep.dev/simulated-exit-code"
	// AnnotationSimulatedShutdown on a pod on a fake node is how long its
	// containers take to exit once the pod is deleted (a Go duration; keep
	// it under the pod's termination grace period, after which a kubelet
	// would kill them): the pod stays Terminating that long, as one that
	// checkpoints on SIGTERM does. Without it a deleted pod goes at once.
	AnnotationSimulatedShutdown = "lockstep.dev/simulated-shutdown"

	// AnnotationSimulatedNodeDark on a pod on a fake (KWOK) node says its
	// node went dark (the e2e harness's DarkenNode): KWOK plays none of our
	// pod stages on it, so it is never started, finished or confirmed
	// deleted, as on a node whose kubelet died (deploy/kwok/stages.yaml).
	// On the node itself it replaces the node's queued heartbeat with a
	// stage that only records EventSimulatedNodeDark.
	AnnotationSimulatedNodeDark = "lockstep.dev/simulated-node-dark"
	// EventSimulatedNodeDark is the reason of the event KWOK records on a
	// node annotated AnnotationSimulatedNodeDark.
	EventSimulatedNodeDark = "SimulatedNodeDark"
	// AnnotationSimulatedChannelReady on a pod on a fake node that claims
	// a ComputeDomain's IMEX channel says the domain is ready: the fake
	// agent, playing NVIDIA's driver, sets it once numNodes of the domain's
	// nodes have joined, and KWOK starts no such pod before, as the driver
	// holds the pod's NodePrepareResources (deploy/kwok/stages.yaml).
	AnnotationSimulatedChannelReady = "lockstep.dev/simulated-channel-ready"
	// AnnotationSimulatedKubeletWithoutDynamicResources set to "true" on a
	// fake node makes the fake agent play a kubelet whose pod-resources
	// API lists no devices prepared for claims (one before Kubernetes
	// 1.34, or with KubeletPodResourcesDynamicResources off): the node's
	// NodeTopology reports no GPU held through DRA, and its
	// DynamicResourcesReported condition is False while a container using
	// claims runs there. The scheduler must then follow the claims alone.
	AnnotationSimulatedKubeletWithoutDynamicResources = "lockstep.dev/simulated-kubelet-without-dynamic-resources"
	// ComputeDomainChannelClaim is the name of the pod claim through which
	// a TrainingJob's pods claim their ComputeDomain's channel.
	ComputeDomainChannelClaim = "compute-domain-channel"
)

// ConstraintMode says how strictly a gang keeps to its topology level.
type ConstraintMode string

const (
	// Required never places wider than the level.
	Required ConstraintMode = "Required"
	// Preferred tries the level and narrower first; wider is allowed as the
	// gang waits (the scheduler's preferredWait).
	Preferred ConstraintMode = "Preferred"
)

// ConstraintModes lists the valid modes: every check of a mode (the API's
// validation, the scheduler's args, a PodGroup's annotation, the planner)
// accepts these.
func ConstraintModes() []ConstraintMode { return []ConstraintMode{Required, Preferred} }

// Valid reports whether m is one of ConstraintModes.
func (m ConstraintMode) Valid() bool { return slices.Contains(ConstraintModes(), m) }

// ConstraintModeList writes ConstraintModes for messages: "Required or
// Preferred".
func ConstraintModeList() string {
	modes := ConstraintModes()
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return strings.Join(names, " or ")
}

// FormatEfficiency writes a placement efficiency (topology.Rating) the one
// way the PodGroup annotation AnnotationPlacementEfficiency, TrainingJob
// status.placement.efficiency and the kubectl plugin show it: three
// decimals, "0.973". Values are clamped to [0.001, 1] so that rounding
// never leaves (0, 1]; an efficiency of 0 or less (not modelled) is "".
func FormatEfficiency(e float64) string {
	switch {
	case e <= 0 || e != e:
		return ""
	case e >= 1:
		return "1.000"
	case e < 0.001:
		return "0.001"
	}
	return strconv.FormatFloat(e, 'f', 3, 64)
}

// The fake topology agent's GPU allocation modes (topology-agent
// --fake-allocation): which GPUs its emulated device plugin gives a pod.
const (
	// FakeAllocationScheduler honours the scheduler's lockstep.dev/gpus
	// when those GPUs are free, as a device plugin that reads it would.
	FakeAllocationScheduler = "scheduler"
	// FakeAllocationDevicePlugin behaves like the stock NVIDIA device
	// plugin, which never reads the annotation: it picks a free set of its
	// own, the highest-indexed free GPUs, never the scheduler's
	// lowest-first choice where another set is free, so anything that
	// trusts the annotation over the reported allocation shows.
	FakeAllocationDevicePlugin = "device-plugin"
)

// AgentResyncInterval is how often the topology agent reads a node's GPU
// allocation by default (its --resync-interval): a pod's GPUs, and their
// release, reach NodeTopology up to this long after the pod starts or goes,
// in the fake agent as in the real one.
const AgentResyncInterval = 10 * time.Second
