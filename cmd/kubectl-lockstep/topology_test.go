package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

// topologyCluster: n1 full, n2 with two GPUs requested and one lost GPU,
// n3 free (its pod finished), n4 free and without a leaf label; one pod is
// not bound yet.
func topologyCluster(t *testing.T) connector {
	return fakeCluster(t,
		hgxNode("n1", "leaf-a"), hgxNode("n2", "leaf-a"), hgxNode("n3", "leaf-b"), hgxNode("n4", ""),
		gpuPod("ml", "p1", "n1", 8, corev1.PodRunning),
		gpuPod("ml", "p2", "n2", 2, corev1.PodPending),
		gpuPod("ml", "p3", "n3", 8, corev1.PodSucceeded),
		gpuPod("ml", "p4", "", 4, corev1.PodPending),
		nodeTopology("n2", []int32{7}, map[string][]int32{"p2": {0, 1}}),
	)
}

func TestTopologyCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{{
		name: "tree",
		want: `DOMAIN            NODES   GPUS   FREE   UNHEALTHY
cluster           4       32     21     1
  spine=s1        4       32     21     1
    leaf=(n4)     1       8      8      <none>
      host=n4     1       8      8      <none>
    leaf=leaf-a   2       16     5      1
      host=n1     1       8      0      <none>
      host=n2     1       8      5      1
    leaf=leaf-b   1       8      8      <none>
      host=n3     1       8      8      <none>
`,
	}, {
		name: "depth",
		args: []string{"--depth", "1"},
		want: `DOMAIN       NODES   GPUS   FREE   UNHEALTHY
cluster      4       32     21     1
  spine=s1   4       32     21     1
`,
	}, {
		name: "one level",
		args: []string{"--level", "leaf"},
		want: `DOMAIN                 NODES   GPUS   FREE   UNHEALTHY
spine=s1/leaf=(n4)     1       8      8      <none>
spine=s1/leaf=leaf-a   2       16     5      1
spine=s1/leaf=leaf-b   1       8      8      <none>
`,
	}, {
		name: "selector and levels",
		args: []string{"-l", "fabric.topograph.run/tier-0=leaf-a", "--levels", "leaf=fabric.topograph.run/tier-0"},
		want: `DOMAIN          NODES   GPUS   FREE   UNHEALTHY
cluster         2       16     5      1
  leaf=leaf-a   2       16     5      1
    host=n1     1       8      0      <none>
    host=n2     1       8      5      1
`,
	}, {
		name: "yaml",
		args: []string{"--depth", "0", "-o", "yaml"},
		want: `domains:
- free: 21
  gpus: 32
  id: cluster
  level: cluster
  name: cluster
  nodes: 4
  unhealthy: 1
levels:
- host
- leaf
- spine
- cluster
`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runWith(t, topologyCluster(t), append([]string{"topology"}, tc.args...)...)
			if err != nil {
				t.Fatalf("topology: %v\n%s", err, stderr)
			}
			if diff := cmp.Diff(tc.want, stdout); diff != "" {
				t.Errorf("stdout (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestTopologyCommandErrors(t *testing.T) {
	tests := []struct {
		name    string
		objs    []runtime.Object
		args    []string
		wantErr string
	}{
		{name: "no nodes", wantErr: "the cluster has no nodes"},
		{name: "selector matches nothing", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"-l", "pool=none"}, wantErr: `no nodes match the selector "pool=none"`},
		{name: "absent level", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"--level", "block"}, wantErr: `no node is labelled for level "block" (label fabric.topograph.run/tier-2)`},
		{name: "unknown level", objs: []runtime.Object{hgxNode("n1", "a")}, args: []string{"--level", "rack"}, wantErr: `unknown level "rack": the levels are host, leaf, spine, cluster`},
		{name: "level and depth", args: []string{"--level", "leaf", "--depth", "1"}, wantErr: "--level lists one level; it cannot be combined with --depth"},
		{name: "output", args: []string{"-o", "wide"}, wantErr: `unsupported output format "wide"`},
		{name: "bad levels", args: []string{"--levels", "leaf"}, wantErr: `--levels: "leaf" is not name=nodeLabelKey`},
		{name: "levels and config", args: []string{"--levels", "a=b", "--topology-config", "x"}, wantErr: "if any flags in the group [levels topology-config] are set none of the others can be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runWith(t, fakeCluster(t, tc.objs...), append([]string{"topology"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCapacityNodes(t *testing.T) {
	withInit := gpuPod("ml", "init", "n1", 1, corev1.PodRunning)
	withInit.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("4")},
	}}}
	terminating := gpuPod("ml", "terminating", "n1", 2, corev1.PodRunning)
	terminating.DeletionTimestamp = &metav1.Time{}
	pods := []corev1.Pod{
		*withInit, *terminating,
		*gpuPod("ml", "failed", "n1", 8, corev1.PodFailed),
		*gpuPod("ml", "unbound", "", 8, corev1.PodPending),
		*gpuPod("ml", "cpu", "n2", 0, corev1.PodRunning),
	}
	topos := map[string]*v1alpha1.NodeTopology{"n2": nodeTopology("n2", []int32{0, 0, 3}, map[string][]int32{"cpu": {1}})}
	got := capacityNodes([]corev1.Node{*hgxNode("n1", "a"), *hgxNode("n2", "a")}, pods, topos)
	want := []capacity.Node{
		// The init container's 4 GPUs exceed the app's 1; a terminating
		// pod holds its GPUs until it is gone.
		{Name: "n1", Labels: hgxNode("n1", "a").Labels, Allocatable: 8, Requested: 6},
		{Name: "n2", Labels: hgxNode("n2", "a").Labels, Allocatable: 8, Reported: &capacity.Reported{Usable: 5, Unhealthy: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capacityNodes (-want,+got):\n%s", diff)
	}
}
