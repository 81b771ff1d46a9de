package topologyplacement

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// TestRestartMidPreemptionRebuildsTheHold: a scheduler preempts a whole
// gang for a higher-priority one and dies (or loses its lease) while the
// victims take their grace period to go. A new scheduler (a restarted one,
// or the standby taking over) starts from the API objects alone: the
// victims terminating with their DisruptionTarget condition, the
// preemptor's members with the nominations the first gave them. It
// rebuilds the same holds, victims and nominations before it plans, and
// evicts nothing more: without the rebuild it would see the terminating
// victims' room as taken, leave them out as candidates, and evict the
// other gang too.
func TestRestartMidPreemptionRebuildsTheHold(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	pods, groups := gangsOf(now)
	first := newPreemptionEnv(t, pods, groups...)
	first.report(t, "n0", "old-0")
	first.report(t, "n1", "old-1")
	nominated := map[string]string{}
	for _, name := range []string{"high-0", "high-1"} {
		r, status := first.preFilterThenPostFilter(t, first.pods[name], first.nodes(t))
		if !status.IsSuccess() {
			t.Fatalf("PostFilter %s: %v", name, status)
		}
		nominated[name] = nominatedNode(r)
	}
	deleted, conditions := first.evicted(t, 2)
	if diff := cmp.Diff([]string{"young-0", "young-1"}, deleted); diff != "" {
		t.Fatalf("the first scheduler's victims (-want,+got):\n%s", diff)
	}
	before := first.gangs.State()
	if len(before.Holds) != 1 || len(before.Nominations) != 2 {
		t.Fatalf("the first scheduler holds %+v; want one hold and two nominations", before)
	}

	// What the API shows mid-preemption: the victims terminating (a 30 s
	// grace period) with their condition, the preemptor nominated.
	var cluster []*v1.Pod
	for _, pod := range pods {
		pod = pod.DeepCopy()
		if c, ok := conditions[pod.Name]; ok {
			pod.Status.Conditions = append(pod.Status.Conditions, c)
			pod.DeletionTimestamp = &metav1.Time{Time: now}
			pod.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}
		pod.Status.NominatedNodeName = nominated[pod.Name]
		cluster = append(cluster, pod)
	}
	second := newPreemptionEnv(t, cluster, groups...)
	second.report(t, "n0", "old-0")
	second.report(t, "n1", "old-1")
	events := second.podEvents(ctx)
	for _, pod := range cluster {
		// The pod informer's first list.
		events.OnAdd(pod, true)
	}
	for _, name := range []string{"high-0", "high-1"} {
		r, status := second.preFilterThenPostFilter(t, second.pods[name], second.nodes(t))
		if !status.IsSuccess() {
			t.Fatalf("PostFilter %s on the new scheduler: %v", name, status)
		}
		if got := nominatedNode(r); got != nominated[name] {
			t.Errorf("the new scheduler nominates %s to %q; the first nominated it to %q", name, got, nominated[name])
		}
	}
	if deleted, _ := second.evicted(t, 0); len(deleted) != 0 {
		t.Errorf("the new scheduler evicted a second set: %v", deleted)
	}
	if diff := cmp.Diff(before, second.gangs.State()); diff != "" {
		t.Errorf("rebuilt state (-lost,+rebuilt):\n%s", diff)
	}

	// The victims go: the rebuilt hold ends as the first one would have,
	// and the gang is planned in the leaf it freed.
	for _, name := range []string{"young-0", "young-1"} {
		events.OnDelete(second.pods[name])
	}
	if n := second.gangs.Books.PendingVictims("ns/high#8"); n != 0 {
		t.Errorf("%d victims still pending once both went", n)
	}
	state := second.gangs.State()
	if len(state.Holds) != 1 || len(state.Holds[0].Victims) != 0 {
		t.Errorf("once its victims went the hold is %+v; want it kept, waiting for none", state.Holds)
	}
	nodes := second.nodes(t, "young-0", "young-1")
	if _, status := second.PreFilter(ctx, framework.NewCycleState(), second.pods["high-0"], nodes); !status.IsSuccess() {
		t.Fatalf("PreFilter once the victims went: %v", status)
	}
	g, ok := second.gangs.Books.Get("ns/high#8")
	if !ok {
		t.Fatal("the gang was not planned in the freed leaf")
	}
	for _, m := range g.Plan().Members {
		if m.Node != "n2" && m.Node != "n3" {
			t.Errorf("planned on %s, outside the leaf the first scheduler freed", m.Node)
		}
	}
}

// TestEvictionNamesTheVictimsUID: a victim's condition patch and its
// delete carry its UID, so that neither reaches a pod of the same name
// created since (TrainingJob pods keep their names across incarnations).
func TestEvictionNamesTheVictimsUID(t *testing.T) {
	pods, groups := gangsOf(time.Unix(1000, 0))
	env := newPreemptionEnv(t, pods, groups...)
	if _, status := env.preFilterThenPostFilter(t, env.pods["high-0"], env.nodes(t)); !status.IsSuccess() {
		t.Fatalf("PostFilter: %v", status)
	}
	env.evicted(t, 2)
	got := map[string][]string{}
	for _, a := range env.clientset.Actions() {
		switch a := a.(type) {
		case clienttesting.DeleteActionImpl:
			var uid string
			if pre := a.DeleteOptions.Preconditions; pre != nil && pre.UID != nil {
				uid = string(*pre.UID)
			}
			got[a.GetName()] = append(got[a.GetName()], "delete "+uid)
		case clienttesting.PatchActionImpl:
			var pod v1.Pod
			if err := json.Unmarshal(a.GetPatch(), &pod); err != nil {
				t.Fatal(err)
			}
			got[a.GetName()] = append(got[a.GetName()], "patch "+string(pod.UID))
		}
	}
	want := map[string][]string{
		"young-0": {"patch uid-young-0", "delete uid-young-0"},
		"young-1": {"patch uid-young-1", "delete uid-young-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writes to victims with the UID they name (-want,+got):\n%s", diff)
	}
}
