package agent

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// writeCounter counts the writes a Publisher makes, by kind of write.
type writeCounter map[string]int

func (w writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w["create"]++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w["update"]++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, isNode := obj.(*corev1.Node); isNode {
				w["patch Node"]++
			} else {
				w["patch other"]++
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w["update "+sub]++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
}

// TestPublisherWritesOnlyOnChangeOrHeartbeat walks one node through the
// agent's life and checks each step makes exactly the writes it must.
func TestPublisherWritesOnlyOnChangeOrHeartbeat(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", UID: "node-uid", Labels: map[string]string{"keep": "me"}}}
	writes := writeCounter{}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(node).
		WithStatusSubresource(&v1alpha1.NodeTopology{}).WithInterceptorFuncs(writes.funcs()).Build()
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pub := &Publisher{Client: c, Clock: clock, HeartbeatInterval: time.Minute, Mode: "real"}

	p, _ := topology.LookupProfile("gb200-nvl72")
	hw, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	spec := v1alpha1.SpecFromTopology(hw, p.Name)
	idle := v1alpha1.NodeTopologyStatus{FreeGPUs: 4}
	busy := v1alpha1.NodeTopologyStatus{FreeGPUs: 2, Allocations: []v1alpha1.GPUAllocation{{Namespace: "a", Pod: "p", PodUID: "u", GPUs: []int32{0, 1}}}}

	steps := []struct {
		name      string
		advance   time.Duration
		spec      func() v1alpha1.NodeTopologySpec
		status    v1alpha1.NodeTopologyStatus
		want      writeCounter
		wantAfter time.Duration
	}{
		{"first publish: labels, object, status", 0, func() v1alpha1.NodeTopologySpec { return spec },
			idle, writeCounter{"patch Node": 1, "create": 1, "update status": 1}, time.Minute},
		{"nothing changed, heartbeat not due", 20 * time.Second, func() v1alpha1.NodeTopologySpec { return spec },
			idle, writeCounter{}, 40 * time.Second},
		{"allocation changed", 10 * time.Second, func() v1alpha1.NodeTopologySpec { return spec },
			busy, writeCounter{"update status": 1}, time.Minute},
		{"heartbeat due", time.Minute, func() v1alpha1.NodeTopologySpec { return spec },
			busy, writeCounter{"update status": 1}, time.Minute},
		{"hardware changed", time.Second, func() v1alpha1.NodeTopologySpec {
			changed := *spec.DeepCopy()
			changed.NVLinkDomain.CliqueID = 7
			return changed
		}, busy, writeCounter{"patch Node": 1, "update": 1}, time.Minute - time.Second},
	}
	for _, step := range steps {
		clock.SetTime(clock.Now().Add(step.advance))
		clear(writes)
		fresh := &corev1.Node{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(node), fresh); err != nil {
			t.Fatal(err)
		}
		after, err := pub.Publish(context.Background(), fresh, step.spec(), step.status)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, writes); diff != "" {
			t.Errorf("%s: writes (-want,+got):\n%s", step.name, diff)
		}
		if after != step.wantAfter {
			t.Errorf("%s: next publish in %s, want %s", step.name, after, step.wantAfter)
		}
	}

	got := &v1alpha1.NodeTopology{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "gpu-0"}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owner references %+v, want the Node", got.OwnerReferences)
	}
	if got.Status.Agent != "real" || !got.Status.HeartbeatTime.Time.Equal(clock.Now().Add(-time.Second)) {
		t.Errorf("status agent %q heartbeat %v", got.Status.Agent, got.Status.HeartbeatTime)
	}
	labelled := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(node), labelled); err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"keep":                     "me",
		lockstep.LabelGPUProduct:   "NVIDIA-GB200",
		lockstep.LabelGPUCount:     "4",
		lockstep.LabelNVLinkDomain: "00000000-0000-0000-0000-000000000000.7",
	}
	if diff := cmp.Diff(wantLabels, labelled.Labels); diff != "" {
		t.Errorf("node labels (-want,+got):\n%s", diff)
	}
}

func TestLabelValue(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"NVIDIA-GB200":          "NVIDIA-GB200",
		" odd/name ":            "odd-name",
	}
	for in, want := range tests {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
