// Package mirror reads and writes our own copies ("mirrors") of other
// projects' API types as unstructured objects. The controller talks to
// APIs whose Go modules are not served, or that may not be installed
// (Kueue's Workload, NVIDIA's ComputeDomain): it declares the fields it
// uses and goes through unstructured, so it starts without the CRD and
// never drops the fields its mirror lacks on an update.
package mirror

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is a mirror type: a struct with TypeMeta and ObjectMeta.
type Object interface {
	SetGroupVersionKind(schema.GroupVersionKind)
}

// FromUnstructured decodes u into a new T.
func FromUnstructured[T any](u *unstructured.Unstructured) (*T, error) {
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// ForCreate is obj as gvk, ready to create: without status (its
// controller writes it) and without the creationTimestamp: null a zero
// ObjectMeta encodes to.
func ForCreate(obj Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	obj.SetGroupVersionKind(gvk)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// NewObject is an empty unstructured object of gvk, for reads and watches.
func NewObject(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// NewList is an empty unstructured list of gvk's kind, for lists.
func NewList(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return l
}
