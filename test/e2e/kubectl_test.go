package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// kubectlLockstep runs the built plugin against the suite's cluster and
// returns its standard output.
func kubectlLockstep(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := filepath.Join(cluster.RepoRoot, "bin", "kubectl-lockstep")
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", cluster.Kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl lockstep %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// leafFree runs `topology --level leaf -o json` and returns free GPUs by
// leaf name.
func leafFree(t *testing.T) map[string]int {
	t.Helper()
	var out struct {
		Domains []struct {
			Name string `json:"name"`
			Free int    `json:"free"`
			GPUs int    `json:"gpus"`
		} `json:"domains"`
	}
	data := kubectlLockstep(t, "topology", "--level", "leaf", "-o", "json")
	if err := json.Unmarshal([]byte(data), &out); err != nil {
		t.Fatalf("decoding topology output: %v\n%s", err, data)
	}
	free := map[string]int{}
	for _, d := range out.Domains {
		free[d.Name] = d.Free
	}
	return free
}

// TestKubectlTopologyAndPlacement runs a gang of four 4-GPU pods and checks
// that `kubectl lockstep topology` shows its GPUs taken in the leaves it
// landed in, and that `kubectl lockstep placement` lists every rank with the
// node and GPUs its pod has.
func TestKubectlTopologyAndPlacement(t *testing.T) {
	ns := cluster.NewNamespace(t)
	waitTopologyCaughtUp(t)
	before := leafFree(t)

	job := pytorchJob(ns, "ranks", 3)
	for role, spec := range job.Spec.ReplicaSpecs {
		spec.Template.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("4")
		job.Spec.ReplicaSpecs[role] = spec
	}
	createJob(t, job)
	pods := waitPods(t, ns, job.Name, 4, time.Minute)
	running := waitJob(t, ns, job.Name, 30*time.Second, "job Running with placement", func(j *v1alpha1.TrainingJob) bool {
		return hasCondition(v1alpha1.JobRunning, "")(j) && j.Status.Placement != nil
	})

	leafOf := map[string]string{}
	for _, n := range cluster.Model.Nodes() {
		leafOf[n.Name] = n.Labels[lockstep.LabelFabricTier0]
	}
	wantTaken := map[string]int{}
	for _, p := range pods {
		wantTaken[leafOf[p.Spec.NodeName]] += 4
	}
	waitTopologyCaughtUp(t)
	after := leafFree(t)
	gotTaken := map[string]int{}
	for leaf, free := range before {
		if taken := free - after[leaf]; taken != 0 {
			gotTaken[leaf] = taken
		}
	}
	if diff := cmp.Diff(wantTaken, gotTaken); diff != "" {
		t.Errorf("GPUs taken by leaf, from topology before and after the job (-want,+got):\n%s", diff)
	}
	tree := kubectlLockstep(t, "topology", "--topology-config", filepath.Join(cluster.RepoRoot, "deploy", "scheduler", "config.yaml"))
	if !strings.HasPrefix(tree, "DOMAIN") || !strings.Contains(tree, "\n  spine=") || !strings.Contains(tree, "\n    leaf=") {
		t.Errorf("topology table lacks the header or the spine and leaf levels:\n%s", tree)
	}
	t.Logf("kubectl lockstep topology --depth 2:\n%s", kubectlLockstep(t, "topology", "--depth", "2"))

	var report struct {
		Placement *v1alpha1.Placement `json:"placement"`
		Ranks     []struct {
			Rank *int32 `json:"rank"`
			Pod  string `json:"pod"`
			Node string `json:"node"`
			GPUs string `json:"gpus"`
		} `json:"ranks"`
	}
	data := kubectlLockstep(t, "placement", job.Name, "-n", ns, "-o", "json")
	if err := json.Unmarshal([]byte(data), &report); err != nil {
		t.Fatalf("decoding placement output: %v\n%s", err, data)
	}
	type rank struct {
		Rank            int32
		Pod, Node, GPUs string
	}
	var want, got []rank
	for i, name := range []string{"ranks-master-0", "ranks-worker-0", "ranks-worker-1", "ranks-worker-2"} {
		p := pods[name]
		set, err := topology.ParseGPUList(p.Annotations[lockstep.AnnotationGPUs])
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		want = append(want, rank{int32(i), name, p.Spec.NodeName, set.List()})
	}
	for _, r := range report.Ranks {
		if r.Rank == nil {
			t.Errorf("pod %s has no rank", r.Pod)
			continue
		}
		got = append(got, rank{*r.Rank, r.Pod, r.Node, r.GPUs})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placement ranks (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(running.Status.Placement, report.Placement); diff != "" {
		t.Errorf("placement summary (-status,+output):\n%s", diff)
	}

	table := kubectlLockstep(t, "placement", job.Name, "-n", ns)
	for _, p := range pods {
		if !strings.Contains(table, p.Name) || !strings.Contains(table, p.Spec.NodeName) {
			t.Errorf("placement table lacks pod %s or its node %s:\n%s", p.Name, p.Spec.NodeName, table)
		}
	}
	t.Logf("kubectl lockstep placement:\n%s", table)
}

// waitTopologyCaughtUp waits until every device-plugin node's NodeTopology
// reports exactly the GPU pods bound there that still hold GPUs: the fake
// agent, as the real one, reports allocation changes at its next read (up
// to 10 s later), so what NodeTopology shows right after pods come or go is
// what it showed before.
func waitTopologyCaughtUp(t *testing.T) {
	t.Helper()
	// DRA nodes report the GPUs of claims, which pods do not count.
	dra := map[string]bool{}
	for _, n := range cluster.Model.Nodes() {
		dra[n.Name] = n.Labels[lockstep.LabelGPUDriver] == lockstep.GPUDriverDRA
	}
	err := localcluster.Poll(context.Background(), 250*time.Millisecond, time.Minute, "NodeTopology reporting the pods' GPUs", func(ctx context.Context) (bool, error) {
		pods, err := cluster.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		want := map[string]map[string]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName == "" || agent.GPURequest(p) == 0 || !agent.HoldsGPUs(p) {
				continue
			}
			if want[p.Spec.NodeName] == nil {
				want[p.Spec.NodeName] = map[string]bool{}
			}
			want[p.Spec.NodeName][string(p.UID)] = true
		}
		var list v1alpha1.NodeTopologyList
		if err := cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		for _, nt := range list.Items {
			if dra[nt.Name] {
				continue
			}
			got := map[string]bool{}
			for _, a := range nt.Status.Allocations {
				got[a.PodUID] = true
			}
			if len(got) != len(want[nt.Name]) {
				return false, nil
			}
			for uid := range got {
				if !want[nt.Name][uid] {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
