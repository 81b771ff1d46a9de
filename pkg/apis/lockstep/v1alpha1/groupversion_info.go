// Package v1alpha1 holds Lockstep's API types: NodeTopology and TrainingJob.
//
// +kubebuilder:object:generate=true
// +groupName=lockstep.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "lockstep.dev", Version: "v1alpha1"}

// AddToScheme registers the types with a scheme. Callers register explicitly;
// nothing is added from an init function.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&NodeTopology{}, &NodeTopologyList{},
		&TrainingJob{}, &TrainingJobList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
