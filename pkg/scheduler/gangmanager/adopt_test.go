package gangmanager

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/placement"
)

// twoLeaves is a tree of nodes a0, a1 in leaf a and b0, b1 in leaf b.
func twoLeaves(t *testing.T) *topology.Tree {
	t.Helper()
	var nodes []topology.NodeLabels
	for _, n := range []string{"a0", "a1", "b0", "b1"} {
		nodes = append(nodes, topology.NodeLabels{Name: n, Labels: map[string]string{"leaf": n[:1]}})
	}
	tree, err := topology.NewTree([]topology.Level{{Name: "leaf", LabelKey: "leaf"}}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// victim is a pod of gang ns/low on node, evicted for ns/high's plan in
// leaf: marked with the condition the scheduler writes and deleted.
func victim(name, node, leaf string, opts ...func(*v1.Pod)) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	pod.Spec.NodeName = node
	pod.Status.Phase = v1.PodRunning
	pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(900, 0)}
	pod.Status.Conditions = []v1.PodCondition{{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler,
		Message: lockstep.Preemption{Preemptor: "ns/high", Priority: 100, Domain: "leaf=" + leaf, Plan: "ns/high#8", DomainID: "leaf=" + leaf}.Message(),
	}}
	for _, o := range opts {
		o(pod)
	}
	return pod
}

func testManager() (*Manager, *clocktesting.FakeClock, *[]string) {
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var activated []string
	m := New(Config{
		Clock:    clock,
		Activate: func(gang string) { activated = append(activated, gang) },
		Reject:   func(string, string) {},
	})
	return m, clock, &activated
}

// TestAdoptRebuildsHolds: what a manager adopts from the pods of a
// cluster mid-preemption, case by case.
func TestAdoptRebuildsHolds(t *testing.T) {
	hold := func(victims ...string) []placement.HoldState {
		return []placement.HoldState{{Gang: "ns/high#8", Domain: "leaf=a", Priority: 100, Victims: victims}}
	}
	tests := []struct {
		name string
		pods []*v1.Pod
		want []placement.HoldState
	}{
		{
			name: "every terminating victim joins one hold of its domain",
			pods: []*v1.Pod{victim("low-0", "a0", "a"), victim("low-1", "a1", "a")},
			want: hold("uid-low-0", "uid-low-1"),
		},
		{
			name: "a victim marked but not deleted is running work: its eviction failed or never came",
			pods: []*v1.Pod{victim("low-0", "a0", "a"), victim("low-1", "a1", "a", func(p *v1.Pod) { p.DeletionTimestamp = nil })},
			want: hold("uid-low-0"),
		},
		{
			name: "a finished victim holds nothing",
			pods: []*v1.Pod{victim("low-0", "a0", "a", func(p *v1.Pod) { p.Status.Phase = v1.PodFailed })},
		},
		{
			name: "an older scheduler's message names no plan: nothing to rebuild",
			pods: []*v1.Pod{victim("low-0", "a0", "a", func(p *v1.Pod) {
				p.Status.Conditions[0].Message = lockstep.Preemption{Preemptor: "ns/high", Priority: 100, Domain: "leaf=a"}.Message()
			})},
		},
		{
			name: "upstream's preemption is not ours",
			pods: []*v1.Pod{victim("low-0", "a0", "a", func(p *v1.Pod) { p.Status.Conditions[0].Message = "Preempted by ns/x on node a0" })},
		},
		{
			name: "a domain gone from the topology holds nothing",
			pods: []*v1.Pod{victim("low-0", "c0", "c")},
		},
		{
			name: "a pod deleted but not evicted is no victim",
			pods: []*v1.Pod{victim("low-0", "a0", "a", func(p *v1.Pod) { p.Status.Conditions = nil })},
		},
	}
	tree := twoLeaves(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, clock, _ := testManager()
			for _, pod := range tc.pods {
				m.ObservePod(pod)
			}
			m.AdoptPending(tree.Find, clock.Now(), time.Hour)
			if diff := cmp.Diff(tc.want, m.State().Holds); diff != "" {
				t.Errorf("holds (-want,+got):\n%s", diff)
			}
			if m.HasPending() {
				t.Error("victims still pending after AdoptPending")
			}
		})
	}
}

// TestAdoptEqualsTheLostState: the holds, victims and nominations a
// manager rebuilds from the API objects equal those of the manager that
// made the preemption, and a victim this manager saw leave its hold is
// never adopted again.
func TestAdoptEqualsTheLostState(t *testing.T) {
	tree := twoLeaves(t)
	leaf, _ := tree.Find("leaf=a")
	lost, clock, _ := testManager()
	plan := &placement.Plan{Domain: leaf, Members: []placement.Assignment{{Node: "a0"}, {Node: "a1"}}}
	if _, ok := lost.Books.Hold("ns/high#8", plan, 100, []string{"uid-low-0", "uid-low-1"}, clock.Now()); !ok {
		t.Fatal("Hold refused")
	}
	lost.Nominate("ns/high#8", "uid-high-0", "ns/high-0", "a0")
	lost.Nominate("ns/high#8", "uid-high-1", "ns/high-1", "a1")

	rebuilt, _, _ := testManager()
	for _, pod := range []*v1.Pod{victim("low-0", "a0", "a"), victim("low-1", "a1", "a")} {
		rebuilt.ObservePod(pod)
	}
	if diff := cmp.Diff([]string{"ns/high#8"}, rebuilt.AdoptPending(tree.Find, clock.Now(), time.Hour).Gangs); diff != "" {
		t.Errorf("gangs adopted (-want,+got):\n%s", diff)
	}
	rebuilt.Nominate("ns/high#8", "uid-high-0", "ns/high-0", "a0")
	rebuilt.Nominate("ns/high#8", "uid-high-1", "ns/high-1", "a1")
	if diff := cmp.Diff(lost.State(), rebuilt.State()); diff != "" {
		t.Errorf("state (-lost,+rebuilt):\n%s", diff)
	}

	// A victim's eviction failed here: it is no longer waited for, and
	// seeing it again (still terminating, say) does not bring it back.
	rebuilt.VictimGone("uid-low-0", clock.Now())
	rebuilt.ObservePod(victim("low-0", "a0", "a"))
	rebuilt.AdoptPending(tree.Find, clock.Now(), time.Hour)
	if diff := cmp.Diff([]string{"uid-low-1"}, rebuilt.State().Holds[0].Victims); diff != "" {
		t.Errorf("victims after one left (-want,+got):\n%s", diff)
	}
}

// TestRetryAfterOnce: a gang with a retry pending is not given a second
// one; the retry runs when the clock reaches it.
func TestRetryAfterOnce(t *testing.T) {
	m, clock, activated := testManager()
	m.RetryAfter("ns/g#8", 30*time.Second)
	m.RetryAfter("ns/g#8", time.Second)
	clock.Step(29 * time.Second)
	if len(*activated) != 0 {
		t.Fatalf("activated %v before the first retry was due", *activated)
	}
	clock.Step(time.Second)
	if diff := cmp.Diff([]string{"ns/g#8"}, *activated); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
	m.RetryAfter("ns/g#8", time.Second)
	clock.Step(time.Second)
	if len(*activated) != 2 {
		t.Errorf("activated %v; want a new retry once the first ran", *activated)
	}
}

// TestInvalidateRetriesTheGangAndThoseTurnedAway: dropping a plan rejects
// its waiting members and retries its gang and the gangs turned away.
func TestInvalidateRetriesTheGangAndThoseTurnedAway(t *testing.T) {
	m, clock, activated := testManager()
	var rejected []string
	m.reject = func(gang, msg string) { rejected = append(rejected, gang+": "+msg) }
	if m.Invalidate("ns/g#8", "expired") {
		t.Error("Invalidate reported a plan the books never had")
	}
	m.Books.Add("ns/g#8", &placement.Plan{Members: []placement.Assignment{{Node: "a0"}}}, clock.Now())
	m.TurnedAway("ns/other#8")
	if !m.Invalidate("ns/g#8", "expired") {
		t.Fatal("Invalidate did not find the plan")
	}
	clock.Step(RetryDelay)
	if diff := cmp.Diff([]string{"ns/g#8: expired"}, rejected); diff != "" {
		t.Errorf("rejected (-want,+got):\n%s", diff)
	}
	got := append([]string(nil), *activated...)
	if diff := cmp.Diff([]string{"ns/g#8", "ns/other#8"}, sortedCopy(got)); diff != "" {
		t.Errorf("activated (-want,+got):\n%s", diff)
	}
	if left := m.TurnedAwayGangs(); len(left) != 0 {
		t.Errorf("still turned away: %v", left)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}

// TestAdoptBoundsRebuiltHolds: a rebuilt hold waits for its victims no
// longer than the hold it replaces would have: until the last of their
// grace periods ends (their deletion timestamps) and a stall after, and
// the manager names the victims it waits for.
func TestAdoptBoundsRebuiltHolds(t *testing.T) {
	tree := twoLeaves(t)
	m, clock, _ := testManager()
	const stall = 4 * time.Minute
	ends := clock.Now().Add(30 * time.Second)
	for i, pod := range []*v1.Pod{victim("low-0", "a0", "a"), victim("low-1", "a1", "a")} {
		pod.DeletionTimestamp = &metav1.Time{Time: ends.Add(-time.Duration(i) * 10 * time.Second)}
		m.ObservePod(pod)
	}
	m.AdoptPending(tree.Find, clock.Now(), stall)
	if diff := cmp.Diff([]string{"ns/low-0", "ns/low-1"}, m.WaitingFor("ns/high#8")); diff != "" {
		t.Errorf("waiting for (-want,+got):\n%s", diff)
	}
	if stuck := m.Books.Overdue("ns/high#8", ends.Add(stall-time.Second)); len(stuck) != 0 {
		t.Errorf("overdue before the last grace period and the stall ended: %v", stuck)
	}
	if diff := cmp.Diff([]string{"uid-low-0", "uid-low-1"}, m.Books.Overdue("ns/high#8", ends.Add(stall))); diff != "" {
		t.Errorf("overdue at the bound (-want,+got):\n%s", diff)
	}
}

// TestAdoptNoticedVictims: a victim given notice and not deleted yet is
// going: its hold is rebuilt, bounded by the notice's deadline, its grace
// period and a stall, and it is handed to the evictor to finish. One
// marked without notice or deletion (its eviction failed) is not.
func TestAdoptNoticedVictims(t *testing.T) {
	tree := twoLeaves(t)
	m, clock, _ := testManager()
	const stall = 4 * time.Minute
	n := lockstep.Notice{By: "ns/high", Time: clock.Now().Add(-10 * time.Second), Deadline: clock.Now().Add(50 * time.Second)}
	noticed := func(pod *v1.Pod) {
		pod.DeletionTimestamp = nil
		pod.Annotations = map[string]string{lockstep.AnnotationPreemptionNotice: n.Format()}
	}
	failed := func(pod *v1.Pod) { pod.DeletionTimestamp = nil }
	m.ObservePod(victim("low-0", "a0", "a", noticed))
	m.ObservePod(victim("stale", "a1", "a", failed))
	got := m.AdoptPending(tree.Find, clock.Now(), stall)
	want := Adopted{
		Gangs: []string{"ns/high#8"},
		Noticed: []Noticed{{UID: "uid-low-0", Pod: "ns/low-0", Notice: n, Preemption: lockstep.Preemption{
			Preemptor: "ns/high", Priority: 100, Domain: "leaf=a", Plan: "ns/high#8", DomainID: "leaf=a",
		}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("adopted (-want,+got):\n%s", diff)
	}
	bound := n.Deadline.Add(30 * time.Second).Add(stall)
	if stuck := m.Books.Overdue("ns/high#8", bound.Add(-time.Second)); len(stuck) != 0 {
		t.Errorf("overdue before the notice, the grace period and the stall ended: %v", stuck)
	}
	if diff := cmp.Diff([]string{"uid-low-0"}, m.Books.Overdue("ns/high#8", bound)); diff != "" {
		t.Errorf("overdue at the bound (-want,+got):\n%s", diff)
	}
}
