package nodeview

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/scheduler/schedtesting"
)

var (
	topologyAt = schedtesting.HGXNodeTopologyAt
	malformed  = schedtesting.Malformed
	drain      = schedtesting.Events
)

// testMaxAge is the plugin's default topologyMaxAge.
const testMaxAge = 5 * time.Minute

// excludedGauge is a nodes_excluded gauge in a registry of its own.
func excludedGauge(t testing.TB) *metrics.GaugeVec {
	t.Helper()
	g := metrics.NewGaugeVec(&metrics.GaugeOpts{Name: "nodes_excluded"}, []string{"reason"})
	if err := metrics.NewKubeRegistry().Register(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTopologyHealthTransitions walks nodes through stale, invalid and back,
// checking which are left out, the events (one per transition, none while
// nothing changes) and the nodes_excluded gauge.
func TestTopologyHealthTransitions(t *testing.T) {
	start := time.Unix(10_000, 0)
	type step struct {
		name string
		// advance moves the clock; update, when set, is an informer update.
		advance time.Duration
		update  func(t *testing.T, h *topologyHealth, now time.Time)
		// want are the excluded nodes and their reasons; wantEvents the
		// reasons of the events of this step, by node.
		want       map[string]string
		wantEvents []string
		wantGauge  map[string]float64
	}
	steps := []step{
		{
			name: "all fresh",
			want: map[string]string{}, wantGauge: map[string]float64{"stale": 0, "invalid": 0},
		},
		{
			name: "a's agent silent past the limit", advance: 5*time.Minute + time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "b", now)) // b keeps heartbeating
			},
			want:       map[string]string{"a": "stale"},
			wantEvents: []string{"a Warning TopologyStale"},
			wantGauge:  map[string]float64{"stale": 1, "invalid": 0},
		},
		{
			name: "still stale: no new event", advance: 10 * time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "b", now))
			},
			want:      map[string]string{"a": "stale"},
			wantGauge: map[string]float64{"stale": 1, "invalid": 0},
		},
		{
			name: "b's spec corrupted", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(malformed(topologyAt(t, "b", now)))
			},
			want:       map[string]string{"a": "stale", "b": "invalid"},
			wantEvents: []string{"b Warning TopologyInvalid"},
			wantGauge:  map[string]float64{"stale": 1, "invalid": 1},
		},
		{
			name: "a heartbeats again, b fixed", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "a", now))
				h.set(topologyAt(t, "b", now))
			},
			want:       map[string]string{},
			wantEvents: []string{"a Normal TopologyRecovered", "b Normal TopologyRecovered"},
			wantGauge:  map[string]float64{"stale": 0, "invalid": 0},
		},
		{
			name: "an object without a heartbeat never ages", advance: time.Hour,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "a", now))
				h.set(topologyAt(t, "b", now))
				h.set(hgxNodeTopology(t, "c"))
			},
			want:      map[string]string{},
			wantGauge: map[string]float64{"stale": 0, "invalid": 0},
		},
		{
			name: "a stale node deleted: gone, without a recovery event", advance: 6 * time.Minute,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "b", now))
			},
			want:       map[string]string{"a": "stale"},
			wantEvents: []string{"a Warning TopologyStale"},
			wantGauge:  map[string]float64{"stale": 1, "invalid": 0},
		},
		{
			name: "deleted", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.remove("a")
			},
			want:      map[string]string{},
			wantGauge: map[string]float64{"stale": 0, "invalid": 0},
		},
	}
	clock := clocktesting.NewFakeClock(start)
	excluded := excludedGauge(t)
	recorder := events.NewFakeRecorder(100)
	h := newTopologyHealth(testMaxAge, clock, recorder, excluded, klog.Background())
	h.set(topologyAt(t, "a", start))
	h.set(topologyAt(t, "b", start))
	for _, s := range steps {
		clock.Step(s.advance)
		if s.update != nil {
			s.update(t, h, clock.Now())
		}
		got := map[string]string{}
		for name, ex := range h.refresh() {
			got[name] = ex.reason
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: excluded (-want,+got):\n%s", s.name, diff)
		}
		// Asked again at once: the same answer, no events.
		again := map[string]string{}
		for name, ex := range h.refresh() {
			again[name] = ex.reason
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Errorf("%s: second refresh differs (-first,+second):\n%s", s.name, diff)
		}
		var gotEvents []string
		for _, e := range drain(recorder) {
			gotEvents = append(gotEvents, eventSummary(e))
		}
		wantEvents := s.wantEvents
		sort.Strings(gotEvents)
		sort.Strings(wantEvents)
		if diff := cmp.Diff(wantEvents, gotEvents, cmpEmpty); diff != "" {
			t.Errorf("%s: events (-want,+got):\n%s", s.name, diff)
		}
		gotGauge := map[string]float64{}
		for _, reason := range []string{excludedStale, excludedInvalid} {
			v, err := testutil.GetGaugeMetricValue(excluded.WithLabelValues(reason))
			if err != nil {
				t.Fatal(err)
			}
			gotGauge[reason] = v
		}
		if diff := cmp.Diff(s.wantGauge, gotGauge); diff != "" {
			t.Errorf("%s: nodes_excluded (-want,+got):\n%s", s.name, diff)
		}
	}
}

// eventSummary turns a FakeRecorder event ("Type Reason Node x ...") into
// "x Type Reason".
func eventSummary(e string) string {
	fields := strings.Fields(e)
	if len(fields) < 4 || fields[2] != "Node" {
		return e
	}
	return fields[3] + " " + fields[0] + " " + fields[1]
}

// cmpEmpty treats nil and empty slices alike.
var cmpEmpty = cmp.Transformer("empty", func(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
})

// TestTopologyHealthMessages checks what the events say: the age and the
// limit for a stale node, the validation error for an invalid one.
func TestTopologyHealthMessages(t *testing.T) {
	start := time.Unix(10_000, 0)
	clock := clocktesting.NewFakeClock(start)
	recorder := events.NewFakeRecorder(10)
	h := newTopologyHealth(2*time.Minute, clock, recorder, excludedGauge(t), klog.Background())
	h.set(topologyAt(t, "a", start))
	h.set(malformed(topologyAt(t, "b", start.Add(3*time.Minute))))
	clock.Step(3 * time.Minute)
	h.refresh()
	got := drain(recorder)
	sort.Strings(got)
	want := []string{
		"Warning TopologyInvalid Node b left out of gang planning: NodeTopology fails validation: links[",
		"Warning TopologyStale Node a left out of gang planning: last heartbeat 3m0s ago (at 1970-01-01T02:46:40Z), more than topologyMaxAge 2m0s",
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %q, want it to start with %q", got[i], want[i])
		}
	}
}

// TestTopologyMaxAgeZeroDisablesStaleness: with topologyMaxAge 0 only
// invalid topology is left out.
func TestTopologyMaxAgeZeroDisablesStaleness(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(10_000, 0))
	h := newTopologyHealth(0, clock, nil, excludedGauge(t), klog.Background())
	h.set(topologyAt(t, "old", time.Unix(0, 0)))
	h.set(malformed(topologyAt(t, "bad", clock.Now())))
	got := map[string]string{}
	for name, ex := range h.refresh() {
		got[name] = ex.reason
	}
	if diff := cmp.Diff(map[string]string{"bad": "invalid"}, got); diff != "" {
		t.Errorf("excluded (-want,+got):\n%s", diff)
	}
}

// A node rejoining planning calls rejoined once per refresh, and only then:
// a heartbeat is no event the scheduling queue acts on, so the plugin
// retries the gangs it turned away from there.
func TestTopologyHealthRejoinedCallback(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(10_000, 0))
	h := newTopologyHealth(time.Minute, clock, nil, excludedGauge(t), klog.Background())
	calls := 0
	h.rejoined = func() { calls++ }
	h.set(topologyAt(t, "a", clock.Now().Add(-time.Hour)))
	h.set(topologyAt(t, "b", clock.Now()))
	h.refresh()
	if calls != 0 {
		t.Fatalf("rejoined called %d times while a node only left", calls)
	}
	h.set(topologyAt(t, "a", clock.Now()))
	h.refresh()
	h.refresh()
	if calls != 1 {
		t.Errorf("rejoined called %d times after node a heartbeat again, want 1", calls)
	}
}

// TestTopologyHealthHeartbeatCostsNoJudgement: a heartbeat of a usable node
// leaves nothing to judge, so the next refresh judges no node; a node
// judged again is one whose verdict can change: one left out that
// heartbeats, one whose spec changed, or one whose last heartbeat aged past
// topologyMaxAge.
func TestTopologyHealthHeartbeatCostsNoJudgement(t *testing.T) {
	start := time.Unix(10_000, 0)
	tests := []struct {
		name string
		// update runs after a, b and c were judged at start and the clock
		// moved by advance; c heartbeated last an hour before start.
		advance time.Duration
		update  func(t *testing.T, h *topologyHealth, now time.Time)
		want    int
	}{
		{name: "nothing happened", want: 0},
		{
			name: "a usable node heartbeats", advance: time.Minute,
			update: func(t *testing.T, h *topologyHealth, now time.Time) { h.set(topologyAt(t, "a", now)) },
			want:   0,
		},
		{
			name: "every usable node heartbeats", advance: 4 * time.Minute,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				h.set(topologyAt(t, "a", now))
				h.set(topologyAt(t, "b", now))
			},
			want: 0,
		},
		{
			name: "a stale node heartbeats", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) { h.set(topologyAt(t, "c", now)) },
			want:   1,
		},
		{
			name: "a spec turns invalid", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) { h.set(malformed(topologyAt(t, "a", now))) },
			want:   1,
		},
		{
			name: "a node is deleted", advance: time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) { h.remove("a") },
			want:   0, // nothing left to judge; it only leaves the verdicts
		},
		{name: "a and b age past topologyMaxAge", advance: testMaxAge + time.Second, want: 2},
		{
			name: "a heartbeated since its heap entry was filed", advance: testMaxAge + time.Second,
			update: func(t *testing.T, h *topologyHealth, now time.Time) {
				// Judged when its first entry falls due, found fresh, and
				// filed again: one judgement for a, one for b gone stale.
				h.set(topologyAt(t, "a", now.Add(-time.Minute)))
			},
			want: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(start)
			h := newTopologyHealth(testMaxAge, clock, nil, excludedGauge(t), klog.Background())
			for _, name := range []string{"a", "b"} {
				h.set(topologyAt(t, name, start))
			}
			h.set(topologyAt(t, "c", start.Add(-time.Hour)))
			h.refresh()
			clock.Step(tc.advance)
			if tc.update != nil {
				tc.update(t, h, clock.Now())
			}
			before := h.judgements
			h.refresh()
			if got := h.judgements - before; got != tc.want {
				t.Errorf("refresh judged %d nodes, want %d", got, tc.want)
			}
		})
	}
}
