package topologyplacement

import (
	"context"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Bounds of the bind backlog (newBindBacklog).
const (
	// minBindBacklog is the smallest backlog allowed, for clients of a
	// few requests a second: a bound of one second of their requests would
	// leave them idle while the apiserver answers.
	minBindBacklog = 16
	// unthrottledBindBacklog is the backlog of a client without a rate
	// limit (QPS < 0), whose requests queue in the apiserver instead.
	unthrottledBindBacklog = 1024
	// maxBindBacklogWait is the longest a pod waits for the backlog to
	// drain. Binds that stop draining (an apiserver that does not answer)
	// slow scheduling to a pod per wait; they never stop it. It is long
	// against a bind on a busy apiserver (a second or two): a shorter one
	// let pods through while binds were only slow, and the backlog grew
	// past its bound.
	maxBindBacklogWait = 10 * time.Second
)

// MaxBindRequests is how many Bindings the plugin has at the apiserver at
// once. The scheduler's client speaks HTTP/2, and kube-apiserver takes 1,000
// concurrent streams per connection (--http2-max-streams-per-connection);
// Go's client dials a new TLS connection for each request that finds every
// stream of its connections in use. A gang's members leave Permit together,
// so an unthrottled client (the in-process scale run's 5,000 QPS) sent the
// 1,024 Bindings of a 4,096-GPU gang at once, beside their events, and
// opened 463 connections to the apiserver in that second, each a TLS
// handshake on both sides (4 % of the scheduler's CPU over the run). A
// quarter of the stream limit leaves room for the scheduler's watches,
// events and status writes on one connection, and at a few milliseconds per
// bind it is thousands of binds a second. A slot is held for the whole
// client call, so a Binding waiting in the client's rate limiter holds one
// too: below 256 QPS the limiter, not this bound, sets the pace either way.
const MaxBindRequests = 256

// bindBacklog bounds how far scheduling runs ahead of binding. The plugin
// plans a gang in a millisecond or two, while every bind is a request the
// scheduler's client sends at its rate limit (clientConnection.qps). On a
// burst the scheduling thread got hundreds of pods ahead: on 5,000 KWOK
// nodes some 600 binds waited at once, each a goroutine with its stack,
// Binding and event, most of them queued in the client's rate limiter.
// That memory, not planning, set the scheduler's peak. PreFilter of a pod
// that asks for GPUs waits while more of the plugin's binds are in flight
// than the client sends in a second: the waiting binds keep the client
// busy, so pods bind as fast (docs/benchmarks.md measures both), and the
// pods not yet scheduled wait in the queue, which holds them anyway.
//
// A pod's bind counts from the first of PreBind and Bind, past Permit, to
// the end of Bind or Unreserve. A gang member waiting at Permit does not
// count: it waits for the scheduling thread, which must not wait for it in
// turn.
type bindBacklog struct {
	clock clock.Clock
	limit int

	mu sync.Mutex
	// inFlight are the pods counted.
	inFlight map[types.UID]struct{}
	// drained is closed, and replaced, when inFlight drops below limit
	// while a PreFilter waits.
	drained chan struct{}
	waiting bool

	// requests holds a token for each Binding at the apiserver, at most
	// MaxBindRequests.
	requests chan struct{}
}

// newBindBacklog returns a backlog of about one second of the client's
// requests at qps (rest.Config.QPS: 0 is client-go's default rate, below
// zero unthrottled).
func newBindBacklog(qps float32, clk clock.Clock) *bindBacklog {
	limit := unthrottledBindBacklog
	if qps >= 0 {
		limit = max(int(math.Ceil(float64(qps))), minBindBacklog)
	}
	return &bindBacklog{clock: clk, limit: limit, inFlight: map[types.UID]struct{}{}, drained: make(chan struct{}),
		requests: make(chan struct{}, MaxBindRequests)}
}

// send calls bind, which sends one Binding, once fewer than MaxBindRequests
// are at the apiserver. Waiting for a slot ends with ctx, without sending.
func (b *bindBacklog) send(ctx context.Context, bind func() error) error {
	select {
	case b.requests <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.requests }()
	return bind()
}

// started counts pod's bind as going out; again is a no-op. done ends it,
// whatever the outcome; for a pod not counted it is a no-op.
func (b *bindBacklog) started(pod types.UID) {
	b.mu.Lock()
	b.inFlight[pod] = struct{}{}
	b.mu.Unlock()
}

func (b *bindBacklog) done(pod types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.inFlight[pod]; !ok {
		return
	}
	delete(b.inFlight, pod)
	if b.waiting && len(b.inFlight) < b.limit {
		close(b.drained)
		b.drained, b.waiting = make(chan struct{}), false
	}
}

// wait returns once fewer than limit binds are in flight, after at most
// maxBindBacklogWait, or when ctx ends. It says how long it waited.
func (b *bindBacklog) wait(ctx context.Context) time.Duration {
	b.mu.Lock()
	if len(b.inFlight) < b.limit {
		b.mu.Unlock()
		return 0
	}
	b.waiting = true
	drained := b.drained
	b.mu.Unlock()
	start := b.clock.Now()
	select {
	case <-drained:
	case <-b.clock.After(maxBindBacklogWait):
	case <-ctx.Done():
	}
	return b.clock.Since(start)
}

// size is the number of binds in flight.
func (b *bindBacklog) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.inFlight)
}
