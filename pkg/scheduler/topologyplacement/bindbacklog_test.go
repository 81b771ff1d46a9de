package topologyplacement

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	clocktesting "k8s.io/utils/clock/testing"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func TestBindBacklogLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		qps  float32
		want int
	}{
		{"a second of the client's rate", 200, 200},
		{"fractions round up", 1000.2, 1001},
		{"a slow client gets the floor", 5.5, minBindBacklog},
		{"client-go's default rate", 0, minBindBacklog},
		{"unthrottled", -1, unthrottledBindBacklog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newBindBacklog(tc.qps, clocktesting.NewFakeClock(time.Now())).limit; got != tc.want {
				t.Errorf("limit for QPS %v = %d, want %d", tc.qps, got, tc.want)
			}
		})
	}
}

// fullBacklog returns a backlog of limit 2 with both binds in flight.
func fullBacklog() (*bindBacklog, *clocktesting.FakeClock) {
	clock := clocktesting.NewFakeClock(time.Unix(0, 0))
	b := newBindBacklog(0, clock)
	b.limit = 2
	b.started("a")
	b.started("b")
	return b, clock
}

// waitAsync runs b.wait in a goroutine and returns what it returns, once it
// waits on the clock (or returned at once).
func waitAsync(t *testing.T, ctx context.Context, b *bindBacklog, clock *clocktesting.FakeClock) <-chan time.Duration {
	t.Helper()
	out := make(chan time.Duration, 1)
	go func() { out <- b.wait(ctx) }()
	for !clock.HasWaiters() && len(out) == 0 {
		time.Sleep(time.Millisecond)
	}
	return out
}

// TestBindBacklogCountsEachPodOnce: a pod counted by PreBind and again by
// Bind is one bind, and ending a pod never counted changes nothing.
func TestBindBacklogCountsEachPodOnce(t *testing.T) {
	b, _ := fullBacklog()
	b.started("a")
	b.done("never-started")
	if got := b.size(); got != 2 {
		t.Fatalf("size = %d, want 2", got)
	}
	b.done("a")
	b.done("a")
	if got := b.size(); got != 1 {
		t.Errorf("size after a's end, twice = %d, want 1", got)
	}
}

// stillWaiting fails t if out has an answer: the wait it is fed by should
// still be waiting.
func stillWaiting[T any](t *testing.T, out <-chan T) {
	t.Helper()
	select {
	case got := <-out:
		t.Fatalf("returned %v with the bind backlog full", got)
	default:
	}
}

func TestBindBacklogWait(t *testing.T) {
	ctx := context.Background()

	t.Run("below the limit it does not wait", func(t *testing.T) {
		b, _ := fullBacklog()
		b.done("a")
		if got := b.wait(ctx); got != 0 {
			t.Errorf("wait = %v with 1 of 2 binds in flight, want 0", got)
		}
	})

	t.Run("a bind that ends lets it go", func(t *testing.T) {
		b, clock := fullBacklog()
		out := waitAsync(t, ctx, b, clock)
		stillWaiting(t, out)
		clock.Step(300 * time.Millisecond)
		b.done("a")
		if got := <-out; got != 300*time.Millisecond {
			t.Errorf("wait = %v, want the 300ms until the bind ended", got)
		}
		// The next full backlog waits on a new signal.
		b.started("c")
		out = waitAsync(t, ctx, b, clock)
		stillWaiting(t, out)
		b.done("c")
		<-out
	})

	t.Run("binds that do not drain hold it at most maxBindBacklogWait", func(t *testing.T) {
		b, clock := fullBacklog()
		out := waitAsync(t, ctx, b, clock)
		clock.Step(maxBindBacklogWait)
		if got := <-out; got != maxBindBacklogWait {
			t.Errorf("wait = %v, want %v", got, maxBindBacklogWait)
		}
		if got := b.size(); got != 2 {
			t.Errorf("size = %d, want the 2 binds still in flight", got)
		}
	})

	t.Run("the cycle's context ends it", func(t *testing.T) {
		b, clock := fullBacklog()
		ctx, cancel := context.WithCancel(ctx)
		out := waitAsync(t, ctx, b, clock)
		cancel()
		<-out
	})
}

// TestPreFilterWaitsForBindsInFlight: a GPU pod's PreFilter waits while the
// backlog is full and goes on, counting the wait, once a bind ends; a pod
// without GPUs, which the plugin never binds, does not wait.
func TestPreFilterWaitsForBindsInFlight(t *testing.T) {
	ctx := context.Background()
	p := newMetricsPlugin(t, 2, true, nil)
	b, clock := fullBacklog()
	p.binds = b

	cpuOnly := utiltesting.MakePod("cpu", "ns").Obj()
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), cpuOnly, p.nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter of a pod without GPUs: %v", status)
	}

	done := make(chan *fwk.Status, 1)
	go func() {
		_, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], p.nodes)
		done <- status
	}()
	for !clock.HasWaiters() && len(done) == 0 {
		time.Sleep(time.Millisecond)
	}
	stillWaiting(t, done)
	clock.Step(250 * time.Millisecond)
	b.done("a")
	if status := <-done; !status.IsSuccess() {
		t.Fatalf("PreFilter after a bind ended: %v", status)
	}
	if got, err := testutil.GetCounterMetricValue(p.metrics.bindBacklogWait); err != nil || got != 0.25 {
		t.Errorf("bind_backlog_wait_seconds_total = %v (%v), want 0.25", got, err)
	}
}

// countedAtPreBind returns a plugin with a gang of two members reserved on
// nodes a and b and past PreBind, so both count in its bind backlog.
func countedAtPreBind(t *testing.T) (*metricsPlugin, []string, []fwk.CycleState) {
	t.Helper()
	p := newMetricsPlugin(t, 2, true, nil)
	p.binds = newBindBacklog(0, clocktesting.NewFakeClock(time.Now()))
	nodes := []string{"a", "b"}
	states := reserveEach(t, p, nodes)
	for i, pod := range p.pods {
		if status := p.PreBind(context.Background(), states[i], pod, nodes[i]); !status.IsSuccess() {
			t.Fatalf("PreBind %s: %v", pod.Name, status)
		}
	}
	return p, nodes, states
}

// TestUnreserveEndsTheBindCount: a member whose binding cycle fails after
// PreBind (another plugin's PreBind) leaves the backlog at Unreserve.
func TestUnreserveEndsTheBindCount(t *testing.T) {
	ctx := context.Background()
	p, nodes, states := countedAtPreBind(t)
	if got := p.binds.size(); got != 2 {
		t.Fatalf("bind backlog after both PreBinds = %d, want 2", got)
	}
	p.Unreserve(ctx, states[0], p.pods[0], nodes[0])
	if got := p.binds.size(); got != 1 {
		t.Errorf("bind backlog after one Unreserve = %d, want 1", got)
	}
}

// TestBoundPodEndsTheBindCount: a member counted at PreBind and then bound
// by another binder (ours never ran) leaves the count when the informer
// sees it bound, and a deleted one when it is deleted.
func TestBoundPodEndsTheBindCount(t *testing.T) {
	ctx := context.Background()
	p, nodes, _ := countedAtPreBind(t)
	events := p.podEvents(ctx)
	bound := p.pods[0].DeepCopy()
	bound.Spec.NodeName = nodes[0]
	events.OnUpdate(p.pods[0], bound)
	if got := p.binds.size(); got != 1 {
		t.Errorf("bind backlog after one member was seen bound = %d, want 1", got)
	}
	events.OnDelete(p.pods[1])
	if got := p.binds.size(); got != 0 {
		t.Errorf("bind backlog after the other was deleted = %d, want 0", got)
	}
}

// TestBindBacklogBoundsRequests: with MaxBindRequests Bindings at the
// apiserver, the next waits for one of them to end, and gives up unsent
// when its context ends.
func TestBindBacklogBoundsRequests(t *testing.T) {
	b := newBindBacklog(-1, clocktesting.NewFakeClock(time.Now()))
	release := make(chan struct{})
	entered := make(chan struct{}, MaxBindRequests)
	errs := make(chan error, MaxBindRequests+1)
	for range MaxBindRequests {
		go func() {
			errs <- b.send(context.Background(), func() error {
				entered <- struct{}{}
				<-release
				return nil
			})
		}()
	}
	for range MaxBindRequests {
		<-entered
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := false
	if err := b.send(ctx, func() error { sent = true; return nil }); !errors.Is(err, context.Canceled) || sent {
		t.Errorf("send with every slot taken and its context ended = %v (sent %v), want context.Canceled, unsent", err, sent)
	}

	late := make(chan struct{})
	go func() {
		errs <- b.send(context.Background(), func() error { close(late); return nil })
	}()
	stillWaiting(t, late)
	release <- struct{}{} // one Binding answered
	<-late
	close(release)
	for range MaxBindRequests + 1 {
		if err := <-errs; err != nil {
			t.Errorf("send: %v", err)
		}
	}
	if n := len(b.requests); n != 0 {
		t.Errorf("%d requests still counted after every Binding ended, want 0", n)
	}
}
