// Package kueue is the TrainingJob side of Kueue's job-integration protocol
// (sigs.k8s.io/kueue v0.17, pkg/controller/jobframework): the Workload a
// queued job is represented by, and the pure decision of what the job and
// its Workload must do next. Kueue itself cannot be imported (its k8s.io
// v0.35 pins fight ours), so the few Workload fields the protocol needs are
// mirrored here, JSON-compatible with the CRD's storage version v1beta2.
//
// Mirrors are read-only models: a write goes to the unstructured object it
// was read from (see Status*), so fields this mirror lacks and Kueue wrote
// (resource usage, requeue state, admission checks) survive it.
package kueue

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockstep-dev/lockstep/pkg/util/mirror"
)

// GroupVersion is Kueue's API group at the Workload CRD's storage version.
var GroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// WorkloadGVK and ResourceFlavorGVK are the kinds the controller reads.
var (
	WorkloadGVK       = GroupVersion.WithKind("Workload")
	ResourceFlavorGVK = GroupVersion.WithKind("ResourceFlavor")
)

// WorkloadResource is the Workload's resource name, for discovery.
const WorkloadResource = "workloads"

// Workload condition types and the reasons the protocol reads or writes.
const (
	ConditionQuotaReserved = "QuotaReserved"
	ConditionAdmitted      = "Admitted"
	ConditionEvicted       = "Evicted"
	ConditionFinished      = "Finished"
	ConditionRequeued      = "Requeued"

	ReasonSucceeded = "Succeeded"
	ReasonFailed    = "Failed"
	// ReasonPending is what a job controller writes on QuotaReserved=False
	// when it gives the quota of an evicted Workload back.
	ReasonPending = "Pending"
	// Evicted reasons after which the Workload is requeued at once.
	ReasonEvictedByPreemption = "Preempted"
	ReasonEvictedNodeFailures = "NodeFailures"
)

// FinalizerResourceInUse is the finalizer Kueue puts on a Workload holding
// quota; the job's controller removes it once the Workload is finished or
// being deleted.
const FinalizerResourceInUse = "kueue.x-k8s.io/resource-in-use"

// Workload mirrors the fields of kueue.x-k8s.io/v1beta2 Workload the
// protocol uses.
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkloadSpec   `json:"spec"`
	Status            WorkloadStatus `json:"status,omitempty"`
}

// WorkloadSpec: one pod set per replica role.
type WorkloadSpec struct {
	PodSets          []PodSet          `json:"podSets"`
	QueueName        string            `json:"queueName,omitempty"`
	PriorityClassRef *PriorityClassRef `json:"priorityClassRef,omitempty"`
	Priority         *int32            `json:"priority,omitempty"`
	Active           *bool             `json:"active,omitempty"`
}

// PodSet is count pods of one template.
type PodSet struct {
	Name     string                 `json:"name"`
	Template corev1.PodTemplateSpec `json:"template"`
	Count    int32                  `json:"count"`
}

// PriorityClassRef names the priority class the priority came from.
type PriorityClassRef struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

// WorkloadStatus is Kueue's verdict.
type WorkloadStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Admission  *Admission         `json:"admission,omitempty"`
}

// Admission is the quota Kueue reserved: a flavor per resource per pod set.
type Admission struct {
	ClusterQueue      string             `json:"clusterQueue"`
	PodSetAssignments []PodSetAssignment `json:"podSetAssignments,omitempty"`
}

// PodSetAssignment is one pod set's flavors (resource name → flavor name).
type PodSetAssignment struct {
	Name    string            `json:"name"`
	Flavors map[string]string `json:"flavors,omitempty"`
	Count   *int32            `json:"count,omitempty"`
}

// FromUnstructured reads the mirror of a Workload.
func FromUnstructured(u *unstructured.Unstructured) (*Workload, error) {
	return mirror.FromUnstructured[Workload](u)
}

// ToUnstructured is the object to create for a new Workload.
func ToUnstructured(w *Workload) (*unstructured.Unstructured, error) {
	return mirror.ForCreate(w, WorkloadGVK)
}

// NewWorkloadObject is an empty unstructured Workload, for reads.
func NewWorkloadObject() *unstructured.Unstructured { return mirror.NewObject(WorkloadGVK) }

// NewWorkloadList is an empty unstructured WorkloadList, for lists.
func NewWorkloadList() *unstructured.UnstructuredList { return mirror.NewList(WorkloadGVK) }

// SetConditions writes conds as the status conditions of the unstructured
// Workload u, leaving the rest of its status as read.
func SetConditions(u *unstructured.Unstructured, conds []metav1.Condition) error {
	out := make([]any, len(conds))
	for i := range conds {
		c, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return err
		}
		out[i] = c
	}
	return unstructured.SetNestedSlice(u.Object, out, "status", "conditions")
}

// IsTrue reports whether w's condition t is True.
func (w *Workload) IsTrue(t string) bool { return meta.IsStatusConditionTrue(w.Status.Conditions, t) }

// HasFinalizer reports whether Kueue's resource-in-use finalizer is on w.
func (w *Workload) HasFinalizer() bool {
	for _, f := range w.Finalizers {
		if f == FinalizerResourceInUse {
			return true
		}
	}
	return false
}
