package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// requeueDeadline is how soon after capacity is freed a gang that waited
// for it must be bound: far below the queue's 5-minute flush of
// unschedulable pods, which is what retried such a gang before QueueingHints
// (issue 16). The GPUs are free for the planner once the node's agent
// reports them so, at its next read (up to lockstep.AgentResyncInterval
// after the pods went, on a real node as on the harness's), and the gang
// is bound within 10 s of that.
const requeueDeadline = lockstep.AgentResyncInterval + 10*time.Second

// requeueGangSize is the waiting gang: four 8-GPU members, 32 GPUs.
const requeueGangSize = 4

// TestGangRequeuedWhenCapacityFrees: every GPU is taken by pinned filler
// pods; a gang whose PodGroup asks minResources of 32 GPUs is submitted and
// turned away by Coscheduling's resource check; four filler pods are deleted.
// The gang must be bound within requeueDeadline of the deletion, every
// round, whether a TrainingJob made its PodGroup or another operator did.
func TestGangRequeuedWhenCapacityFrees(t *testing.T) {
	// Each round waits for the agent to report the freed GPUs twice (the
	// fillers' and the gang's): up to 20 s a round. Eight rounds of each
	// kind keep the test near two minutes on 2 cores; set
	// E2E_REQUEUE_ROUNDS=20 for a longer hunt for a missed requeue.
	rounds := 8
	if v, err := strconv.Atoi(os.Getenv("E2E_REQUEUE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for _, tc := range []struct {
		name string
		// submit creates round r's gang and returns the name of its PodGroup;
		// remove deletes it and waits until its pods are gone.
		submit func(t *testing.T, ns string, r int) string
		remove func(t *testing.T, ns, gang string)
	}{
		{name: "TrainingJob", submit: submitRequeueJob, remove: removeRequeueJob},
		{name: "OperatorPodGroup", submit: submitOperatorGang, remove: deleteOperatorGang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := cluster.NewNamespace(t)
			nodes := cluster.Model.Nodes()
			names := make([]string, len(nodes))
			for i, n := range nodes {
				names[i] = n.Name
			}
			fillers := fillNodes(t, ns, names)
			var waits []time.Duration
			for r := range rounds {
				gang := tc.submit(t, ns, r)
				waitRejectedForResources(t, ns, gang)

				// Free the nodes of four filler pods, rotating through the
				// cluster, and time the gang from the moment they are gone.
				freed := make([]string, requeueGangSize)
				for i := range freed {
					freed[i] = names[(r*requeueGangSize+i)%len(names)]
				}
				for _, node := range freed {
					deletePodNow(t, ns, fillers[node])
				}
				freedAt := time.Now()
				bound := waitBoundWithin(t, ns, gang, freedAt)
				waits = append(waits, time.Since(freedAt))
				for _, p := range bound {
					if !slices.Contains(freed, p.Spec.NodeName) {
						t.Fatalf("round %d: %s bound to %s, not to a freed node %v", r, p.Name, p.Spec.NodeName, freed)
					}
				}

				// Back to a full cluster for the next round.
				tc.remove(t, ns, gang)
				for _, node := range freed {
					fillers[node] = fillNode(t, ns, node, fmt.Sprintf("filler-%d-%s", r, node))
				}
				waitFillersBound(t, ns, fillers)
			}
			t.Logf("%d rounds; gang bound after capacity freed in %v", rounds, waits)
		})
	}
}

// fillNodes pins one 8-GPU filler pod to each node and waits until they are
// bound; it returns the filler pod's name by node.
func fillNodes(t *testing.T, ns string, nodes []string) map[string]string {
	t.Helper()
	fillers := map[string]string{}
	for _, node := range nodes {
		fillers[node] = fillNode(t, ns, node, "filler-"+node)
	}
	waitFillersBound(t, ns, fillers)
	return fillers
}

func fillNode(t *testing.T, ns, node, name string) string {
	t.Helper()
	pod := utiltesting.MakePod(name, ns).GPUs(8).SchedulerName(localcluster.SchedulerName).Obj()
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	cluster.CreatePods(t, pod)
	return name
}

func waitFillersBound(t *testing.T, ns string, fillers map[string]string) {
	t.Helper()
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, time.Minute, "filler pods bound", func(ctx context.Context) (bool, error) {
		for node, name := range fillers {
			p, err := cluster.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != node {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func deletePodNow(t *testing.T, ns, name string) {
	t.Helper()
	err := cluster.Clientset.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// waitRejectedForResources waits until every member of the gang exists and
// was turned away, and the gang as a whole was turned away by Coscheduling's
// minResources check ("resource gap"), so the gang is parked among the
// unschedulable pods when capacity frees. Members tried before their last
// sibling existed may keep Coscheduling's sibling-count message: the
// scheduler shows an unscheduled pod's creation only to pods in a
// scheduling cycle at that moment, so the capacity event must retry them
// too.
func waitRejectedForResources(t *testing.T, ns, gang string) {
	t.Helper()
	var last string
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, time.Minute, "gang "+gang+" rejected for minResources", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, gang)
		if err != nil {
			return false, nil
		}
		if len(pods) != requeueGangSize {
			last = fmt.Sprintf("%d pods", len(pods))
			return false, nil
		}
		gap := false
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("%s bound to %s while the cluster is full", p.Name, p.Spec.NodeName)
			}
			c := podScheduledCondition(&p)
			if c == nil || c.Status != corev1.ConditionFalse {
				last = fmt.Sprintf("%s not yet rejected: %+v", p.Name, c)
				return false, nil
			}
			gap = gap || strings.Contains(c.Message, "resource gap")
		}
		last = "no member rejected for its resource gap"
		return gap, nil
	})
	if err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
}

func podScheduledCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// waitBoundWithin waits until every member of the gang is bound, at most
// requeueDeadline after freedAt. With E2E_REQUEUE_MEASURE=1 a gang that
// misses the deadline is still waited for (up to 6 minutes), so the failure
// says how long it took.
func waitBoundWithin(t *testing.T, ns, gang string, freedAt time.Time) []corev1.Pod {
	t.Helper()
	var bound []corev1.Pod
	allBound := func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, gang)
		if err != nil {
			return false, nil
		}
		bound = framework.BoundPods(pods)
		return len(bound) == requeueGangSize, nil
	}
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, time.Until(freedAt.Add(requeueDeadline)), "gang "+gang+" bound", allBound)
	if err == nil {
		return bound
	}
	if os.Getenv("E2E_REQUEUE_MEASURE") == "1" {
		if err := localcluster.Poll(context.Background(), 200*time.Millisecond, 6*time.Minute, "gang "+gang+" bound", allBound); err == nil {
			t.Fatalf("gang %s bound %v after capacity was freed; want within %v", gang, time.Since(freedAt).Round(time.Second), requeueDeadline)
		}
	}
	t.Fatalf("%v: %d of %d bound within %v of capacity being freed", err, len(bound), requeueGangSize, requeueDeadline)
	return nil
}

// submitOperatorGang creates what an operator other than ours (Kubeflow's
// training-operator, say) creates: a scheduler-plugins PodGroup with
// minMember and minResources, and pods labelled with it for
// lockstep-scheduler.
func submitOperatorGang(t *testing.T, ns string, r int) string {
	t.Helper()
	name := fmt.Sprintf("op-%d", r)
	pg := utiltesting.MakePodGroup(name, ns, requeueGangSize).Obj()
	pg.Spec.MinResources = corev1.ResourceList{
		lockstep.GPUResource: *resource.NewQuantity(8*requeueGangSize, resource.DecimalSI),
		corev1.ResourceCPU:   *resource.NewQuantity(requeueGangSize, resource.DecimalSI),
	}
	if err := cluster.Client.Create(context.Background(), pg); err != nil {
		t.Fatal(err)
	}
	for i := range requeueGangSize {
		cluster.CreatePods(t, utiltesting.MakePod(fmt.Sprintf("%s-%d", name, i), ns).GPUs(8).
			SchedulerName(localcluster.SchedulerName).PodGroup(name).Obj())
	}
	return name
}

func deleteOperatorGang(t *testing.T, ns, gang string) {
	t.Helper()
	deleteGang(t, ns, gang)
	if err := cluster.Client.Delete(context.Background(), &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gang}}); err != nil {
		t.Fatal(err)
	}
}

// submitRequeueJob creates a PyTorch TrainingJob of one Master and three
// Workers of 8 GPUs each; the controller makes its PodGroup (minResources
// the sum of the pods' requests) and pods.
func submitRequeueJob(t *testing.T, ns string, r int) string {
	t.Helper()
	name := fmt.Sprintf("tj-%d", r)
	createJob(t, pytorchGang(ns, name, requeueGangSize-1, gpuTemplate("pytorch", 8).Obj()).Obj())
	return name
}

// removeRequeueJob deletes the TrainingJob and waits until its pods are gone.
func removeRequeueJob(t *testing.T, ns, job string) {
	t.Helper()
	ctx := context.Background()
	err := cluster.Client.Delete(ctx, &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job}})
	if err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 100*time.Millisecond, time.Minute, "pods of "+job+" gone", func(ctx context.Context) (bool, error) {
		pods, err := gangPods(ctx, ns, job)
		return err == nil && len(pods) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
