package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// benchReconciler is a fake agent over a fake client holding objs, with
// heartbeats far apart so a reconcile of an unchanged node writes nothing.
// Its publisher's clock is a *clocktesting.FakePassiveClock.
func benchReconciler(b testing.TB, objs ...client.Object) *FakeReconciler {
	b.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.NodeTopology{}).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(obj client.Object) []string {
			return []string{obj.(*corev1.Pod).Spec.NodeName}
		}).Build()
	selector, err := labels.Parse(lockstep.LabelProfile)
	if err != nil {
		b.Fatal(err)
	}
	return &FakeReconciler{
		Client:       c,
		Publisher:    &Publisher{Client: c, Clock: clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0)), HeartbeatInterval: time.Hour, Mode: "fake"},
		Recorder:     record.NewFakeRecorder(1000),
		NodeSelector: selector,
	}
}

// benchReconcile times the reconcile of an unchanged node, what every pod
// or heartbeat event of a node costs once the node is published.
func benchReconcile(b *testing.B, r *FakeReconciler, node string) {
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: node}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFakeReconcile is an HGX H100 device-plugin node with four 2-GPU
// pods bound to it.
func BenchmarkFakeReconcile(b *testing.B) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h100-0", UID: "uid-h100-0", Labels: map[string]string{lockstep.LabelProfile: "hgx-h100"}}}
	objs := []client.Object{node}
	for i := range 4 {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-p%d", i))},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("2")},
			}}}},
		})
	}
	benchReconcile(b, benchReconciler(b, objs...), node.Name)
}
