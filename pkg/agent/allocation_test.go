package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

func newAllocator(t *testing.T, profile string, unhealthy topology.GPUSet) *Allocator {
	t.Helper()
	p, ok := topology.LookupProfile(profile)
	if !ok {
		t.Fatalf("no profile %s", profile)
	}
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := topology.NewSelector(node)
	if err != nil {
		t.Fatal(err)
	}
	return &Allocator{Node: node, Selector: sel, Unhealthy: unhealthy}
}

// gpuPod is a pod of n GPUs created at second created, optionally with the
// scheduler's GPU choice.
func gpuPod(name string, n int64, created int, gpus string) *corev1.Pod {
	p := utiltesting.MakePod(name, "ns").GPUs(n).Obj()
	p.UID = types.UID("uid-" + name)
	p.CreationTimestamp = metav1.NewTime(time.Unix(int64(created), 0))
	if gpus != "" {
		p.Annotations = map[string]string{lockstep.AnnotationGPUs: gpus}
	}
	return p
}

func alloc(pod string, gpus ...int32) v1alpha1.GPUAllocation {
	return v1alpha1.GPUAllocation{Namespace: "ns", Pod: pod, PodUID: "uid-" + pod, GPUs: gpus}
}

func TestAllocate(t *testing.T) {
	finished := gpuPod("done", 4, 0, "")
	finished.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name      string
		profile   string
		unhealthy topology.GPUSet
		prior     []v1alpha1.GPUAllocation
		pods      []*corev1.Pod
		// devicePlugin ignores the annotation, as the stock device plugin.
		devicePlugin bool
		want         []v1alpha1.GPUAllocation
		wantProblems []string // pod names
	}{
		{
			name:    "scheduler's choice honoured",
			profile: "hgx-h100",
			pods:    []*corev1.Pod{gpuPod("a", 2, 1, "6,7")},
			want:    []v1alpha1.GPUAllocation{alloc("a", 6, 7)},
		},
		{
			name:    "no annotation: NVLink-connected pair on DGX-1",
			profile: "dgx1-v100",
			pods:    []*corev1.Pod{gpuPod("a", 2, 1, "")},
			// 0-3 and 0-4 are NV2 on the cube mesh; the lowest such pair wins.
			want: []v1alpha1.GPUAllocation{alloc("a", 0, 3)},
		},
		{
			name:         "annotation naming taken GPUs falls back to the best free set",
			profile:      "hgx-h100",
			prior:        []v1alpha1.GPUAllocation{alloc("a", 0, 1, 2, 3)},
			pods:         []*corev1.Pod{gpuPod("a", 4, 1, ""), gpuPod("b", 4, 2, "2,3,4,5")},
			want:         []v1alpha1.GPUAllocation{alloc("a", 0, 1, 2, 3), alloc("b", 4, 5, 6, 7)},
			wantProblems: []string{"b"},
		},
		{
			name:         "malformed annotation is reported, pod still served",
			profile:      "hgx-h100",
			pods:         []*corev1.Pod{gpuPod("a", 1, 1, "zero")},
			want:         []v1alpha1.GPUAllocation{alloc("a", 0)},
			wantProblems: []string{"a"},
		},
		{
			name:    "prior allocations are kept; finished pods release theirs",
			profile: "hgx-h100",
			prior:   []v1alpha1.GPUAllocation{alloc("a", 4, 5), alloc("done", 0, 1, 2, 3)},
			pods:    []*corev1.Pod{gpuPod("a", 2, 1, ""), finished, gpuPod("c", 4, 3, "")},
			want:    []v1alpha1.GPUAllocation{alloc("a", 4, 5), alloc("c", 0, 1, 2, 3)},
		},
		{
			name:         "oldest pod is served first when GPUs run out",
			profile:      "gb200-nvl72",
			pods:         []*corev1.Pod{gpuPod("late", 4, 9, ""), gpuPod("early", 4, 1, "")},
			want:         []v1alpha1.GPUAllocation{alloc("early", 0, 1, 2, 3)},
			wantProblems: []string{"late"},
		},
		{
			name:         "unhealthy GPUs are never handed out",
			profile:      "gb200-nvl72",
			unhealthy:    topology.NewGPUSet(0),
			pods:         []*corev1.Pod{gpuPod("a", 3, 1, "0,1,2"), gpuPod("b", 1, 2, "")},
			want:         []v1alpha1.GPUAllocation{alloc("a", 1, 2, 3)},
			wantProblems: []string{"a", "b"},
		},
		{
			name:         "device plugin: the annotation is not read, its own free set is taken",
			profile:      "hgx-h100",
			devicePlugin: true,
			pods:         []*corev1.Pod{gpuPod("a", 4, 1, "0,1,2,3"), gpuPod("b", 2, 2, "4,5")},
			want:         []v1alpha1.GPUAllocation{alloc("a", 4, 5, 6, 7), alloc("b", 2, 3)},
		},
		{
			name:         "device plugin: prior allocations kept, unhealthy skipped, no room is a problem",
			profile:      "hgx-h100",
			unhealthy:    topology.NewGPUSet(7),
			devicePlugin: true,
			prior:        []v1alpha1.GPUAllocation{alloc("a", 0, 1)},
			pods:         []*corev1.Pod{gpuPod("a", 2, 1, "6,7"), gpuPod("b", 3, 2, ""), gpuPod("c", 4, 3, "")},
			want:         []v1alpha1.GPUAllocation{alloc("a", 0, 1), alloc("b", 4, 5, 6)},
			wantProblems: []string{"c"},
		},
		{
			name:    "pods without GPUs are ignored",
			profile: "l40s-pcie",
			pods:    []*corev1.Pod{utiltesting.MakePod("cpu", "ns").Obj()},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(t, tc.profile, tc.unhealthy)
			a.IgnoreAnnotation = tc.devicePlugin
			got, problems := a.Allocate(tc.prior, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("allocations (-want,+got):\n%s", diff)
			}
			var gotProblems []string
			for _, p := range problems {
				gotProblems = append(gotProblems, p.Pod.Name)
				if p.Reason == "" {
					t.Errorf("problem for %s has no reason", p.Pod.Name)
				}
			}
			if diff := cmp.Diff(tc.wantProblems, gotProblems); diff != "" {
				t.Errorf("problems (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestGPURequest(t *testing.T) {
	pod := utiltesting.MakePod("p", "ns").GPUs(2).Obj()
	pod.Spec.Containers = append(pod.Spec.Containers, pod.Spec.Containers[0])
	pod.Spec.InitContainers = []corev1.Container{pod.Spec.Containers[0]}
	if got := GPURequest(pod); got != 4 {
		t.Errorf("two app containers of 2 and an init container of 2: GPURequest = %d, want 4", got)
	}
	pod.Spec.InitContainers[0] = *utiltesting.MakePod("x", "ns").GPUs(8).Obj().Spec.Containers[0].DeepCopy()
	if got := GPURequest(pod); got != 8 {
		t.Errorf("init container of 8: GPURequest = %d, want 8", got)
	}
}
