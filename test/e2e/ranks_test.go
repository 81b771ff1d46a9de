package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestRanksFollowTopology: with five of the eight nodes of every leaf
// taken, jobs of twelve 8-GPU ranks must span all four leaves. For each
// framework the ranks its environment gives the pods (PyTorch RANK, MPI
// hostfile order, TF_CONFIG task order) must, read in rank order, visit
// each leaf in one run and never come back to a leaf they left; rank 0 must
// be the rendezvous pod, and every ranked pod's lockstep.dev/rank must be
// its environment's rank. A gang of pods without ranks (another operator's)
// must be bound with ranks 0..11 in the same leaf-by-leaf order.
func TestRanksFollowTopology(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	leaves := nodesByLeaf()
	var full []string
	for _, leaf := range slices.Sorted(maps.Keys(leaves)) {
		full = append(full, leaves[leaf][:5]...)
	}
	fill(t, ns, "full", 8, full)
	waitRunningAllocated(t, ns, len(full))
	nodeLeaf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		nodeLeaf[n.Name] = n.Labels[leafLabel]
	}

	type role = v1alpha1.ReplicaType
	for _, tc := range []struct {
		name      string
		framework v1alpha1.Framework
		container string
		replicas  map[role]int32
		gpus      map[role]int64
		// envRanks reads each ranked pod's rank from what the framework
		// gives it.
		envRanks func(t *testing.T, job string, pods map[string]corev1.Pod) map[string]int
		rank0    string
	}{{
		name:      "pytorch",
		framework: v1alpha1.FrameworkPyTorch,
		container: "pytorch",
		replicas:  map[role]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 11},
		gpus:      map[role]int64{v1alpha1.ReplicaMaster: 8, v1alpha1.ReplicaWorker: 8},
		envRanks: func(t *testing.T, _ string, pods map[string]corev1.Pod) map[string]int {
			out := map[string]int{}
			for name, p := range pods {
				r, err := strconv.Atoi(envOf(p)["RANK"])
				if err != nil {
					t.Fatalf("pod %s: RANK: %v", name, err)
				}
				out[name] = r
			}
			return out
		},
		rank0: "master-0",
	}, {
		name:      "mpi",
		framework: v1alpha1.FrameworkMPI,
		container: "mpi",
		replicas:  map[role]int32{v1alpha1.ReplicaLauncher: 1, v1alpha1.ReplicaWorker: 12},
		gpus:      map[role]int64{v1alpha1.ReplicaWorker: 8},
		envRanks: func(t *testing.T, job string, _ map[string]corev1.Pod) map[string]int {
			cm, err := cluster.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, job+"-config", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for i, line := range strings.Split(strings.TrimSpace(cm.Data["hostfile"]), "\n") {
				host, _, _ := strings.Cut(line, ".")
				out[host] = i
			}
			return out
		},
		rank0: "worker-0",
	}, {
		name:      "tensorflow",
		framework: v1alpha1.FrameworkTensorFlow,
		container: "tensorflow",
		replicas:  map[role]int32{v1alpha1.ReplicaChief: 1, v1alpha1.ReplicaWorker: 11},
		gpus:      map[role]int64{v1alpha1.ReplicaChief: 8, v1alpha1.ReplicaWorker: 8},
		envRanks: func(t *testing.T, _ string, pods map[string]corev1.Pod) map[string]int {
			out := map[string]int{}
			for name, p := range pods {
				var config struct {
					Cluster map[string][]string `json:"cluster"`
					Task    struct {
						Type  string `json:"type"`
						Index int    `json:"index"`
					} `json:"task"`
				}
				if err := json.Unmarshal([]byte(envOf(p)["TF_CONFIG"]), &config); err != nil {
					t.Fatalf("pod %s: TF_CONFIG: %v", name, err)
				}
				// MultiWorkerMirroredStrategy's task order: the chief, then
				// the workers.
				r := config.Task.Index
				if config.Task.Type == "worker" {
					r += len(config.Cluster["chief"])
				}
				out[name] = r
			}
			return out
		},
		rank0: "chief-0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "ranks-" + tc.name
			// Preferred at leaf level, each pod asking for tc.gpus[role] GPUs.
			w := utiltesting.MakeTrainingJob(name, ns).Framework(tc.framework).RunPolicy(v1alpha1.RunPolicy{}).
				Topology("leaf", v1alpha1.TopologyPreferred)
			for role, n := range tc.replicas {
				w.Role(role, n, gpuTemplate(tc.container, tc.gpus[role]).Obj())
			}
			job := w.Obj()
			createJob(t, job)
			pods := waitPods(t, ns, name, int(job.Spec.TotalReplicas()), time.Minute)
			defer deleteJob(t, ns, job)

			envRanks := tc.envRanks(t, name, pods)
			byRank := make([]string, len(envRanks))
			for pod, r := range envRanks {
				if r < 0 || r >= len(byRank) || byRank[r] != "" {
					t.Fatalf("environment ranks %v are not 0..%d, each once", envRanks, len(byRank)-1)
				}
				byRank[r] = strings.TrimPrefix(pod, name+"-")
			}
			if byRank[0] != tc.rank0 {
				t.Errorf("rank 0 is %s, want the rendezvous pod %s", byRank[0], tc.rank0)
			}
			var leafOrder []string
			for r, short := range byRank {
				p, ok := pods[name+"-"+short]
				if !ok {
					t.Fatalf("rank %d: pod %s-%s missing", r, name, short)
				}
				if got := p.Annotations[lockstep.AnnotationRank]; got != strconv.Itoa(r) {
					t.Errorf("pod %s: %s=%q, its environment's rank is %d", p.Name, lockstep.AnnotationRank, got, r)
				}
				leafOrder = append(leafOrder, nodeLeaf[p.Spec.NodeName])
			}
			for podName, p := range pods {
				if _, ranked := envRanks[podName]; !ranked && p.Spec.NodeName == "" {
					t.Errorf("unranked pod %s not bound", podName)
				}
			}
			t.Logf("leaves in rank order: %v", leafOrder)
			runs := slices.Compact(slices.Clone(leafOrder))
			seen := map[string]bool{}
			for _, leaf := range runs {
				if seen[leaf] {
					t.Fatalf("the rank order returns to %s after leaving it: %v", leaf, leafOrder)
				}
				seen[leaf] = true
			}
			if len(runs) < 2 {
				t.Fatalf("the job sits in %v; the test needs it to span leaves", runs)
			}
		})
	}

	// Pods of other operators carry no rank: they are bound with their
	// slot's place in topology order, for the downward API.
	t.Run("unranked gang", func(t *testing.T) {
		createGang(t, ns, "foreign", 12, 8, map[string]string{
			lockstep.AnnotationTopologyLevel: "leaf",
			lockstep.AnnotationTopologyMode:  string(lockstep.Preferred),
		})
		pods := waitGangBound(t, ns, "foreign", 12, time.Minute)
		leafOrder := make([]string, len(pods))
		for _, p := range pods {
			r, err := strconv.Atoi(p.Annotations[lockstep.AnnotationRank])
			if err != nil || r < 0 || r >= len(pods) || leafOrder[r] != "" {
				t.Fatalf("pod %s bound with %s=%q: want ranks 0..%d, each once", p.Name, lockstep.AnnotationRank, p.Annotations[lockstep.AnnotationRank], len(pods)-1)
			}
			leafOrder[r] = nodeLeaf[p.Spec.NodeName]
		}
		t.Logf("leaves in rank order: %v", leafOrder)
		seen := map[string]bool{}
		for _, leaf := range slices.Compact(slices.Clone(leafOrder)) {
			if seen[leaf] {
				t.Fatalf("the rank order returns to %s after leaving it: %v", leaf, leafOrder)
			}
			seen[leaf] = true
		}
	})
}

// deleteJob deletes a job and waits until its pods are gone, so the next
// job has their GPUs.
func deleteJob(t *testing.T, ns string, job *v1alpha1.TrainingJob) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.Client.Delete(ctx, job); err != nil {
		t.Fatalf("deleting TrainingJob %s: %v", job.Name, err)
	}
	err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "pods of "+job.Name+" gone", func(ctx context.Context) (bool, error) {
		list, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + job.Name})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
