package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
)

func testNode(ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: taints}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.Time{Time: t0.Add(-time.Hour)}}}
	}
	return n
}

func taint(key string, effect corev1.TaintEffect, added time.Time) corev1.Taint {
	t := corev1.Taint{Key: key, Effect: effect}
	if !added.IsZero() {
		t.TimeAdded = &metav1.Time{Time: added}
	}
	return t
}

func TestOutageOf(t *testing.T) {
	unreachable := taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, t0)
	notReady := taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute, t0.Add(time.Second))
	type want struct {
		Out            bool
		Since          time.Time
		Silent, Fenced bool
	}
	cases := []struct {
		name string
		node *corev1.Node
		want want
	}{
		{name: "ready, no taints", node: testNode(corev1.ConditionTrue)},
		{name: "kubelet stopped: unknown and unreachable", node: testNode(corev1.ConditionUnknown, unreachable),
			want: want{Out: true, Since: t0, Silent: true}},
		{name: "kubelet answers NotReady: neither silent nor fenced", node: testNode(corev1.ConditionFalse, notReady),
			want: want{Out: true, Since: t0.Add(time.Second)}},
		{name: "unknown but only the NoSchedule taint so far", node: testNode(corev1.ConditionUnknown,
			taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule, t0))},
		{name: "unknown, no taint yet (the tainter is rate limited)", node: testNode(corev1.ConditionUnknown)},
		{name: "ready again, taint not yet removed: recovering", node: testNode(corev1.ConditionTrue, unreachable)},
		{name: "unknown with the not-ready taint: neither", node: testNode(corev1.ConditionUnknown, notReady),
			want: want{Out: true, Since: t0.Add(time.Second)}},
		{name: "out-of-service fences even a Ready node", node: testNode(corev1.ConditionTrue,
			taint(corev1.TaintNodeOutOfService, corev1.TaintEffectNoExecute, t0.Add(time.Minute))),
			want: want{Out: true, Since: t0.Add(time.Minute), Fenced: true}},
		{name: "out-of-service NoSchedule without a stamp: the Ready transition", node: testNode(corev1.ConditionFalse,
			taint(corev1.TaintNodeOutOfService, corev1.TaintEffectNoSchedule, time.Time{})),
			want: want{Out: true, Since: t0.Add(-time.Hour), Fenced: true}},
		{name: "no Ready condition counts as unknown", node: testNode("", unreachable),
			want: want{Out: true, Since: t0, Silent: true}},
		{name: "earliest taint counts", node: testNode(corev1.ConditionFalse, notReady,
			taint(corev1.TaintNodeOutOfService, corev1.TaintEffectNoExecute, t0.Add(-time.Second))),
			want: want{Out: true, Since: t0.Add(-time.Second), Fenced: true}},
		{name: "silent and fenced", node: testNode(corev1.ConditionUnknown, unreachable,
			taint(corev1.TaintNodeOutOfService, corev1.TaintEffectNoExecute, t0.Add(time.Minute))),
			want: want{Out: true, Since: t0, Silent: true, Fenced: true}},
		{name: "other NoExecute taints do not count", node: testNode(corev1.ConditionFalse,
			taint("example.com/maintenance", corev1.TaintEffectNoExecute, t0))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, out := outageOf(tc.node)
			got := want{Out: out, Since: o.since, Silent: o.silent, Fenced: o.fenced}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outageOf (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestNodeLossDecision runs observe, the node-loss assessment and decide as
// ensureRunning does, for a gang whose Worker 1 sits on an unavailable node.
func TestNodeLossDecision(t *testing.T) {
	run := corev1.PodRunning
	dark := map[string]nodeOutage{"node-j-worker-1": {since: t0, silent: true}}
	notReady := map[string]nodeOutage{"node-j-worker-1": {since: t0}}
	evicted := func() []*corev1.Pod {
		pods := testGang(run, run, run)
		pods[2].DeletionTimestamp = &metav1.Time{Time: t0}
		return pods
	}
	type want struct {
		Restart      []string
		Incident     string
		Reason       string
		Gang         bool
		RequeueAfter time.Duration
		Lost         []string
		Running      int32
		Disruption   string
	}
	cases := []struct {
		name    string
		job     *v1alpha1.TrainingJob
		pods    []*corev1.Pod
		outages map[string]nodeOutage
		now     time.Time
		want    want
	}{{
		name: "healthy nodes: nothing",
		job:  testJob(""), pods: testGang(run, run, run), now: t0.Add(time.Hour),
		want: want{Running: 3},
	}, {
		name: "bound not reached: requeue for the rest, no restart",
		job:  testJob(""), pods: testGang(run, run, run), outages: dark, now: t0.Add(10 * time.Second),
		want: want{RequeueAfter: 20 * time.Second, Running: 3},
	}, {
		name: "bound reached: one gang restart naming the node",
		job:  testJob(""), pods: testGang(run, run, run), outages: dark, now: t0.Add(30 * time.Second),
		want: want{
			Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Gang: true, Reason: ReasonNodeUnreachable,
			Incident: "node node-j-worker-1 is unreachable (pods j-worker-1); runPolicy.unreachableToleranceSeconds is 30s",
			Lost:     []string{"j-worker-1"}, Running: 2, Disruption: ReasonNodeUnreachable,
		},
	}, {
		name: "NotReady with a live kubelet: the cluster's 300 s, not the job's 30",
		job:  testJob(""), pods: testGang(run, run, run), outages: notReady, now: t0.Add(time.Minute),
		want: want{RequeueAfter: 240 * time.Second, Running: 3},
	}, {
		name: "NotReady for 300 s: lost",
		job:  testJob(""), pods: testGang(run, run, run), outages: notReady, now: t0.Add(300 * time.Second),
		want: want{
			Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Gang: true, Reason: ReasonNodeUnreachable,
			Incident: "node node-j-worker-1 is unreachable (pods j-worker-1); runPolicy.unreachableToleranceSeconds is 30s",
			Lost:     []string{"j-worker-1"}, Running: 2, Disruption: ReasonNodeUnreachable,
		},
	}, {
		name: "bound of 0: restart as soon as the node is marked",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](0)}
		}),
		pods: testGang(run, run, run), outages: dark, now: t0,
		want: want{
			Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Gang: true, Reason: ReasonNodeUnreachable,
			Incident: "node node-j-worker-1 is unreachable (pods j-worker-1); runPolicy.unreachableToleranceSeconds is 0s",
			Lost:     []string{"j-worker-1"}, Running: 2, Disruption: ReasonNodeUnreachable,
		},
	}, {
		name: "a bound above the 300 s default holds",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{UnreachableToleranceSeconds: ptr.To[int32](600)}
		}),
		pods: testGang(run, run, run), outages: dark, now: t0.Add(400 * time.Second),
		want: want{RequeueAfter: 200 * time.Second, Running: 3},
	}, {
		name: "evicted by the taint manager first: still NodeUnreachable",
		job:  testJob(""), pods: evicted(), outages: dark, now: t0.Add(30 * time.Second),
		want: want{
			Restart: []string{"j-master-0", "j-worker-0"}, Gang: true, Reason: ReasonNodeUnreachable,
			Incident: "node node-j-worker-1 is unreachable (pods j-worker-1); runPolicy.unreachableToleranceSeconds is 30s",
			Lost:     []string{"j-worker-1"}, Running: 2, Disruption: ReasonNodeUnreachable,
		},
	}, {
		name: "backoff limit 0: an infrastructure restart does not count",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.RunPolicy = &v1alpha1.RunPolicy{BackoffLimit: ptr.To[int32](0)}
		}),
		pods: testGang(run, run, run), outages: dark, now: t0.Add(time.Minute),
		want: want{
			Restart: []string{"j-master-0", "j-worker-0", "j-worker-1"}, Gang: true, Reason: ReasonNodeUnreachable,
			Incident: "node node-j-worker-1 is unreachable (pods j-worker-1); runPolicy.unreachableToleranceSeconds is 30s",
			Lost:     []string{"j-worker-1"}, Running: 2, Disruption: ReasonNodeUnreachable,
		},
	}, {
		name: "pod scope: left to the taint manager",
		job: testJob("", func(j *v1alpha1.TrainingJob) {
			j.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
		}),
		pods: testGang(run, run, run), outages: dark, now: t0.Add(time.Minute),
		want: want{Running: 3},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAdapter(t, tc.job)
			scope := framework.EffectiveRestartScope(a, tc.job)
			obs := observe(tc.job, tc.pods, scope)
			var nl nodeLoss
			if scope == v1alpha1.RestartScopeGang {
				nl = assessNodeLoss(obs, tc.pods, tc.outages, time.Duration(unreachableTolerance(tc.job))*time.Second, tc.now)
				nl.markLost(&obs)
			}
			d := nl.amend(decide(tc.job, a, obs, tc.now))
			got := want{Incident: d.incident, Reason: d.reason, Gang: d.gangRestart, RequeueAfter: nl.requeueAfter,
				Lost: obs.lost, Running: obs.running}
			if d.disruption != nil {
				got.Disruption = d.disruption.reason
			}
			for _, p := range d.restart {
				got.Restart = append(got.Restart, p.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestUnreachableTolerations(t *testing.T) {
	seconds := func(s int64) *int64 { return &s }
	mine := func(key string, s int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds(s)}
	}
	cases := []struct {
		name  string
		given []corev1.Toleration
		want  []corev1.Toleration
	}{
		{name: "none: unreachable at the bound, not-ready at the cluster's 300 s",
			want: []corev1.Toleration{mine(corev1.TaintNodeUnreachable, 30), mine(corev1.TaintNodeNotReady, 300)}},
		{name: "the template's own unreachable toleration wins",
			given: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists}},
			want:  []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists}, mine(corev1.TaintNodeNotReady, 300)}},
		{name: "tolerate everything: nothing added",
			given: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			want:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		{name: "a NoSchedule toleration does not cover eviction",
			given: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			want: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				mine(corev1.TaintNodeUnreachable, 30), mine(corev1.TaintNodeNotReady, 300)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := corev1.PodSpec{Tolerations: tc.given}
			unreachableTolerations(&spec, 30)
			if diff := cmp.Diff(tc.want, spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestForceDeletable(t *testing.T) {
	pod := func(name, node string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return p
	}
	outages := map[string]nodeOutage{
		"silent":   {since: t0, silent: true},
		"silent2":  {since: t0.Add(time.Minute), silent: true},
		"fenced":   {since: t0, fenced: true},
		"notready": {since: t0},
	}
	pods := []*corev1.Pod{
		pod("dying-on-silent", "silent", true),
		pod("dying-on-silent2", "silent2", true),
		pod("running-on-silent", "silent", false),
		pod("dying-on-fenced", "fenced", true),
		pod("dying-on-notready", "notready", true),
		pod("dying-on-healthy", "healthy", true),
		pod("dying-unbound", "", true),
	}
	const bound = 600 * time.Second
	cases := []struct {
		name  string
		bound time.Duration
		now   time.Time
		want  []string
		wait  time.Duration
	}{
		{name: "silent for less than the bound: only the fenced node", bound: bound, now: t0.Add(2 * time.Minute),
			want: []string{"dying-on-fenced"}, wait: 8 * time.Minute},
		{name: "one silent node past the bound", bound: bound, now: t0.Add(10 * time.Minute),
			want: []string{"dying-on-silent", "dying-on-fenced"}, wait: time.Minute},
		{name: "both past it", bound: bound, now: t0.Add(time.Hour),
			want: []string{"dying-on-silent", "dying-on-silent2", "dying-on-fenced"}},
		{name: "bound 0 (opt-in): as soon as the node is silent", now: t0.Add(time.Minute),
			want: []string{"dying-on-silent", "dying-on-silent2", "dying-on-fenced"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doomed, wait := forceDeletable(pods, outages, tc.bound, tc.now)
			var got []string
			for _, p := range doomed {
				got = append(got, p.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("force-deletable (-want,+got):\n%s", diff)
			}
			if wait != tc.wait {
				t.Errorf("wait = %v, want %v", wait, tc.wait)
			}
		})
	}
}

func TestNodeAvailabilityIgnoresHeartbeats(t *testing.T) {
	a := testNode(corev1.ConditionTrue)
	b := a.DeepCopy()
	b.Status.Conditions[0].LastHeartbeatTime = metav1.Time{Time: t0}
	b.Labels = map[string]string{"x": "y"}
	if nodeAvailability(a) != nodeAvailability(b) {
		t.Error("a heartbeat or a label changed the availability key")
	}
	c := testNode(corev1.ConditionUnknown, taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, t0))
	if nodeAvailability(a) == nodeAvailability(c) {
		t.Error("a node turning unreachable kept its availability key")
	}
}
