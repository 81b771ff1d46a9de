package topologyplacement

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientsetfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestBindCarriesTheGPUs binds a planned gang of two and checks that each
// Binding names the member's node and carries its GPUs and the gang's
// domain, that pods without an assignment are left to DefaultBinder, and
// that a failed Binding is reported with the pod.
func TestBindCarriesTheGPUs(t *testing.T) {
	tests := []struct {
		name    string
		cacher  bool
		bindErr error
		// happened: the apiserver bound the pod before the error (an
		// answer lost on the way back).
		happened bool
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "bound", wantCode: fwk.Success},
		{name: "bound through the API cacher", cacher: true, wantCode: fwk.Success},
		{name: "apiserver refuses", bindErr: errors.New("pod is being deleted"), wantCode: fwk.Error, wantMsg: "binding pod ns/m-0 to a with GPUs 0,1,2,3,4,5,6,7: pod is being deleted"},
		{name: "API cacher refuses", cacher: true, bindErr: errors.New("pod is being deleted"), wantCode: fwk.Error, wantMsg: "pod is being deleted"},
		{name: "answer lost after the bind took effect", bindErr: errors.New("503 Service Unavailable"), happened: true, wantCode: fwk.Success},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := newMetricsPlugin(t, 2, true, nil)
			p.binds = newBindBacklog(0, clocktesting.NewFakeClock(time.Now()))
			var bindings []*v1.Binding
			// inFlight is the bind backlog each Binding was sent with.
			var inFlight []int
			cs := p.handle.ClientSet().(*clientsetfake.Clientset)
			cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "binding" {
					return false, nil, nil
				}
				b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
				bindings = append(bindings, b)
				inFlight = append(inFlight, p.binds.size())
				if tc.happened {
					obj, err := cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
					if err != nil {
						t.Fatal(err)
					}
					pod := obj.(*v1.Pod).DeepCopy()
					pod.Spec.NodeName = b.Target.Name
					if err := cs.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), pod, b.Namespace); err != nil {
						t.Fatal(err)
					}
				}
				return true, nil, tc.bindErr
			})
			cacher := &recordingCacher{err: tc.bindErr}
			if tc.cacher {
				p.handle.(*fakeHandle).apiCacher = cacher
			}
			states := reserveEach(t, p, []string{"a", "b"})
			// The member's bind counts from PreBind, past Permit.
			if status := p.PreBind(ctx, states[0], p.pods[0], "a"); !status.IsSuccess() {
				t.Fatalf("PreBind: %v", status)
			}
			if got := p.binds.size(); got != 1 {
				t.Errorf("bind backlog after PreBind = %d, want 1", got)
			}
			status := p.Bind(ctx, states[0], p.pods[0], "a")
			if status.Code() != tc.wantCode || !strings.Contains(status.Message(), tc.wantMsg) {
				t.Fatalf("Bind: %v, want code %v and a message containing %q", status, tc.wantCode, tc.wantMsg)
			}
			sent, other := bindings, cacher.bindings
			if tc.cacher {
				sent, other = cacher.bindings, bindings
			}
			if len(sent) != 1 || len(other) != 0 {
				t.Fatalf("%d Bindings sent the expected way and %d the other, want 1 and 0", len(sent), len(other))
			}
			if !tc.cacher && !slices.Equal(inFlight, []int{1}) {
				t.Errorf("bind backlog while the Binding was sent: %v, want [1]", inFlight)
			}
			if got := p.binds.size(); got != 0 {
				t.Errorf("bind backlog after Bind = %d, want 0 whatever the outcome", got)
			}
			b := sent[0]
			if b.Name != "m-0" || b.Namespace != "ns" || b.UID != p.pods[0].UID || b.Target.Kind != "Node" || b.Target.Name != "a" {
				t.Errorf("Binding %s/%s uid %s to %s %s, want ns/m-0 uid %s to Node a", b.Namespace, b.Name, b.UID, b.Target.Kind, b.Target.Name, p.pods[0].UID)
			}
			g, _ := p.gangs.Books.Get("ns/g#8")
			if diff := cmp.Diff(map[string]string{
				lockstep.AnnotationGPUs:   "0,1,2,3,4,5,6,7",
				lockstep.AnnotationDomain: g.Plan().Domain.DisplayID(),
				// The pods carry no rank: their slot's place in topology order.
				lockstep.AnnotationRank: "0",
			}, b.Annotations); diff != "" {
				t.Errorf("Binding annotations (-want,+got):\n%s", diff)
			}
		})
	}
}

// reserveEach runs PreFilter and Reserve for each of p's pods, the i-th on
// nodes[i], and returns their cycle states.
func reserveEach(t *testing.T, p *metricsPlugin, nodes []string) []fwk.CycleState {
	t.Helper()
	ctx := context.Background()
	states := make([]fwk.CycleState, len(p.pods))
	for i, pod := range p.pods {
		states[i] = framework.NewCycleState()
		if _, status := p.PreFilter(ctx, states[i], pod, p.nodes); !status.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", pod.Name, status)
		}
		if status := p.Reserve(ctx, states[i], pod, nodes[i]); !status.IsSuccess() {
			t.Fatalf("Reserve %s: %v", pod.Name, status)
		}
	}
	return states
}

// recordingCacher is the scheduler's API cacher as Bind uses it: it records
// Bindings and finishes each with err.
type recordingCacher struct {
	framework.APICacher
	err      error
	bindings []*v1.Binding
}

func (c *recordingCacher) BindPod(b *v1.Binding) (<-chan error, error) {
	c.bindings = append(c.bindings, b)
	done := make(chan error, 1)
	done <- c.err
	return done, nil
}

func (c *recordingCacher) WaitOnFinish(ctx context.Context, onFinish <-chan error) error {
	return <-onFinish
}

// TestBindSkipsPodsWithoutGPUChoice: pods the plugin chose no GPUs for are
// DefaultBinder's, and PreBind has nothing to do for them.
func TestBindSkipsPodsWithoutGPUChoice(t *testing.T) {
	ctx := context.Background()
	p := newMetricsPlugin(t, 1, true, nil)
	pod := utiltesting.MakePod("cpu-only", "ns").Obj()
	state := framework.NewCycleState()
	if status := p.Bind(ctx, state, pod, "a"); status.Code() != fwk.Skip {
		t.Errorf("Bind: %v, want Skip", status)
	}
	if status := p.PreBindPreFlight(ctx, state, pod, "a"); status.Code() != fwk.Skip {
		t.Errorf("PreBindPreFlight: %v, want Skip", status)
	}
	if n := len(p.handle.ClientSet().(*clientsetfake.Clientset).Actions()); n != 0 {
		t.Errorf("%d API calls, want none", n)
	}
}

// TestBindFailsMemberWhosePlanWasDropped: a gang member past Permit whose
// plan was dropped (another member's bind failed) binds with the GPUs it
// reserved, which the books keep; one whose GPUs were forgotten must not
// fall through to DefaultBinder, which would bind it without GPUs.
func TestBindFailsMemberWhosePlanWasDropped(t *testing.T) {
	ctx := context.Background()
	p := newMetricsPlugin(t, 2, true, nil)
	state := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, state, p.pods[0], p.nodes); !status.IsSuccess() {
		t.Fatal(status)
	}
	if status := p.Reserve(ctx, state, p.pods[0], "a"); !status.IsSuccess() {
		t.Fatal(status)
	}
	p.invalidate("ns/g#8", dropUnreserved)
	if a, ok := p.gangs.Books.AssignmentOf(p.pods[0].UID); !ok || a.GPUs == 0 {
		t.Fatalf("member lost its GPUs when the plan was dropped: %+v, %v", a, ok)
	}
	p.gangs.Books.ForgetPod(p.pods[0].UID)
	status := p.Bind(ctx, state, p.pods[0], "a")
	if status.Code() != fwk.Error || !strings.Contains(status.Message(), "plan was dropped") {
		t.Errorf("Bind = %v, want an error saying the plan was dropped", status)
	}
	if n := len(p.handle.ClientSet().(*clientsetfake.Clientset).Actions()); n != 0 {
		t.Errorf("%d API calls, want none", n)
	}
}
