package mirror

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec   `json:"spec,omitempty"`
	Status            widgetStatus `json:"status,omitempty"`
}

type widgetSpec struct {
	Size int `json:"size,omitempty"`
}

type widgetStatus struct {
	Ready bool `json:"ready,omitempty"`
}

var gvk = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

func TestForCreateAndBack(t *testing.T) {
	w := &widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns"}, Spec: widgetSpec{Size: 3}, Status: widgetStatus{Ready: true}}
	u, err := ForCreate(w, gvk)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "w", "namespace": "ns"},
		"spec":       map[string]any{"size": int64(3)},
	}
	if diff := cmp.Diff(want, u.Object); diff != "" {
		t.Errorf("ForCreate (-want +got):\n%s", diff)
	}
	got, err := FromUnstructured[widget](u)
	if err != nil {
		t.Fatal(err)
	}
	w.Status = widgetStatus{}
	if diff := cmp.Diff(w, got); diff != "" {
		t.Errorf("FromUnstructured (-want +got):\n%s", diff)
	}
	if _, err := FromUnstructured[widget](&unstructured.Unstructured{Object: map[string]any{"spec": "not an object"}}); err == nil {
		t.Error("FromUnstructured of a malformed object: no error")
	}
}

func TestNewObjectAndList(t *testing.T) {
	if got := NewObject(gvk).GroupVersionKind(); got != gvk {
		t.Errorf("NewObject: %v, want %v", got, gvk)
	}
	if got, want := NewList(gvk).GroupVersionKind(), gvk.GroupVersion().WithKind("WidgetList"); got != want {
		t.Errorf("NewList: %v, want %v", got, want)
	}
}
