package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// placedJob: llama's Master and Worker 0 share n1, Worker 1 runs on n2
// without a GPU annotation (its GPUs come from n2's NodeTopology), Worker 2
// is not bound yet.
func placedJob(t *testing.T) connector {
	running := v1alpha1.TrainingJobStatus{
		State: v1alpha1.JobRunning,
		Placement: &v1alpha1.Placement{
			Domain: "spine=s1/leaf=leaf-a", LevelName: "leaf", LevelsSpanned: 2, Nodes: []string{"n1", "n2"},
			BusBandwidthMBps: 48250, Efficiency: "0.95",
		},
	}
	pending := jobPod("llama", v1alpha1.ReplicaWorker, 2, "", 2, "")
	pending.Status.Phase = corev1.PodPending
	other := jobPod("other", v1alpha1.ReplicaMaster, 0, "n3", 8, "0,1,2,3,4,5,6,7")
	pg := &schedv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "ml", Annotations: map[string]string{
		lockstep.AnnotationTopologyLevel: "spine", lockstep.AnnotationTopologyMode: "Required",
		lockstep.AnnotationPlacementDomain: "spine=s1/leaf=leaf-a", lockstep.AnnotationPlacementLevel: "leaf", lockstep.AnnotationPlacementEfficiency: "0.95",
	}}}
	return fakeCluster(t,
		hgxNode("n1", "leaf-a"), hgxNode("n2", "leaf-a"), hgxNode("n3", "leaf-b"),
		pytorchJob("llama", 3, running), pg,
		jobPod("llama", v1alpha1.ReplicaWorker, 0, "n1", 4, "7,6,5,4"),
		jobPod("llama", v1alpha1.ReplicaMaster, 0, "n1", 4, "0,1,2,3"),
		jobPod("llama", v1alpha1.ReplicaWorker, 1, "n2", 2, ""),
		pending, other,
		nodeTopology("n2", nil, map[string][]int32{"llama-worker-1": {3, 2}}),
	)
}

func TestPlacementCommand(t *testing.T) {
	stdout, stderr, err := runWith(t, placedJob(t), "placement", "llama", "-n", "ml")
	if err != nil {
		t.Fatalf("placement: %v\n%s", err, stderr)
	}
	want := `TrainingJob:      ml/llama
Framework:        PyTorch
State:            Running
Placement:        spine=s1/leaf=leaf-a (level leaf, 2 nodes)
Levels spanned:   2
Bus bandwidth:    48.2 GB/s (modelled all-reduce bus bandwidth)
Efficiency:       0.95
Rated here:       <none> (pod llama-worker-2 is not bound yet)
PodGroup:         llama
  Constraint:     spine (Required)
  Placed in:      spine=s1/leaf=leaf-a (level leaf, efficiency 0.95)

RANK   POD              ROLE     STATUS    NODE     GPUS      LEAF     SPINE
0      llama-master-0   Master   Running   n1       0,1,2,3   leaf-a   s1
1      llama-worker-0   Worker   Running   n1       4,5,6,7   leaf-a   s1
2      llama-worker-1   Worker   Running   n2       2,3       leaf-a   s1
3      llama-worker-2   Worker   Pending   <none>   <none>    <none>   <none>
`
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("stdout (-want,+got):\n%s", diff)
	}
}

// TestPlacementRatedHere: the plugin rates a bound job with the function
// the controller uses and says whether status.placement agrees.
func TestPlacementRatedHere(t *testing.T) {
	p, _ := topology.LookupProfile("hgx-h100")
	hw, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	withSpec := func(node string) *v1alpha1.NodeTopology {
		nt := nodeTopology(node, nil, nil)
		nt.Spec = v1alpha1.SpecFromTopology(hw, "hgx-h100")
		return nt
	}
	for _, tc := range []struct {
		name, statusEfficiency, want string
	}{
		{"status agrees", "1.000", "Rated here:       1.000 in spine=s1/leaf=leaf-a, 1 levels spanned (status agrees)\n" +
			"  Why:            on 2 nodes in leaf leaf-a; as fast as the best placement (bus bandwidth 50.0 GB/s)\n"},
		{"status differs", "0.95", "Rated here:       1.000 in spine=s1/leaf=leaf-a, 1 levels spanned (status differs)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := v1alpha1.TrainingJobStatus{State: v1alpha1.JobRunning, Placement: &v1alpha1.Placement{
				Domain: "spine=s1/leaf=leaf-a", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"n1", "n2"}, Efficiency: tc.statusEfficiency,
			}}
			c := fakeCluster(t,
				hgxNode("n1", "leaf-a"), hgxNode("n2", "leaf-a"), hgxNode("n3", "leaf-b"),
				pytorchJob("llama", 1, status),
				jobPod("llama", v1alpha1.ReplicaMaster, 0, "n1", 8, "0,1,2,3,4,5,6,7"),
				jobPod("llama", v1alpha1.ReplicaWorker, 0, "n2", 8, "0,1,2,3,4,5,6,7"),
				withSpec("n1"), withSpec("n2"), withSpec("n3"),
			)
			stdout, stderr, err := runWith(t, c, "placement", "llama", "-n", "ml")
			if err != nil {
				t.Fatalf("placement: %v\n%s", err, stderr)
			}
			if !strings.Contains(stdout, tc.want) {
				t.Errorf("stdout lacks %q:\n%s", tc.want, stdout)
			}
		})
	}
}

func TestPlacementCommandJSON(t *testing.T) {
	stdout, stderr, err := runWith(t, placedJob(t), "placement", "llama", "-n", "ml", "-o", "json", "--levels", "leaf="+lockstep.LabelFabricTier0)
	if err != nil {
		t.Fatalf("placement: %v\n%s", err, stderr)
	}
	var got placementReport
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("decoding %s: %v", stdout, err)
	}
	leafA := []domainRef{{Level: "leaf", Name: "leaf-a", ID: "leaf=leaf-a"}}
	wantRanks := []rankRow{
		{Rank: ptr.To[int32](0), Role: "Master", Index: ptr.To[int32](0), Pod: "llama-master-0", Phase: "Running", Node: "n1", GPUs: "0,1,2,3", GPUSource: "annotation", Domains: leafA},
		{Rank: ptr.To[int32](1), Role: "Worker", Index: ptr.To[int32](0), Pod: "llama-worker-0", Phase: "Running", Node: "n1", GPUs: "4,5,6,7", GPUSource: "annotation", Domains: leafA},
		{Rank: ptr.To[int32](2), Role: "Worker", Index: ptr.To[int32](1), Pod: "llama-worker-1", Phase: "Running", Node: "n2", GPUs: "2,3", GPUSource: "allocation", Domains: leafA},
		{Rank: ptr.To[int32](3), Role: "Worker", Index: ptr.To[int32](2), Pod: "llama-worker-2", Phase: "Pending"},
	}
	if diff := cmp.Diff(wantRanks, got.Ranks); diff != "" {
		t.Errorf("ranks (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"leaf"}, got.Levels); diff != "" {
		t.Errorf("levels (-want,+got):\n%s", diff)
	}
	if got.Placement == nil || got.Placement.Efficiency != "0.95" || got.PodGroup == nil || got.PodGroup.PlacementLevel != "leaf" {
		t.Errorf("summary: placement %+v, PodGroup %+v", got.Placement, got.PodGroup)
	}
}

func TestPlacementCommandErrors(t *testing.T) {
	created := pytorchJob("llama", 1, v1alpha1.TrainingJobStatus{
		State: v1alpha1.JobCreated,
		Conditions: []metav1.Condition{{Type: "Created", Status: metav1.ConditionFalse, Reason: "FailedCreatePod",
			Message: `serviceaccounts "trainer" not found`}},
	})
	tests := []struct {
		name    string
		objs    []runtime.Object
		args    []string
		wantErr string
	}{
		{name: "no job", args: []string{"llama"}, wantErr: `TrainingJob "llama" not found in namespace "default"`},
		{name: "wrong namespace", objs: []runtime.Object{created}, args: []string{"llama", "-n", "dev"}, wantErr: `TrainingJob "llama" not found in namespace "dev"`},
		{name: "no pods", objs: []runtime.Object{created}, args: []string{"llama", "-n", "ml"},
			wantErr: `TrainingJob ml/llama has no pods; it is Created: FailedCreatePod: serviceaccounts "trainer" not found`},
		{name: "no state", objs: []runtime.Object{pytorchJob("llama", 1, v1alpha1.TrainingJobStatus{})}, args: []string{"llama", "-n", "ml"},
			wantErr: "has no pods yet and no state: is the Lockstep controller running?"},
		{name: "no job name", wantErr: "accepts 1 arg(s), received 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runWith(t, fakeCluster(t, tc.objs...), append([]string{"placement"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRanks covers the rank order of the other frameworks and pods the
// spec does not account for.
func TestRanks(t *testing.T) {
	mpi := utiltesting.MakeTrainingJob("m", "ml").Framework(v1alpha1.FrameworkMPI).
		Replicas(v1alpha1.ReplicaLauncher, 1).Replicas(v1alpha1.ReplicaWorker, 2).Obj()
	tf := utiltesting.MakeTrainingJob("tf", "ml").Framework(v1alpha1.FrameworkTensorFlow).
		Replicas(v1alpha1.ReplicaChief, 1).Replicas(v1alpha1.ReplicaPS, 1).Replicas(v1alpha1.ReplicaWorker, 2).Obj()
	terminating := jobPod("m", v1alpha1.ReplicaWorker, 0, "n1", 1, "")
	terminating.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name string
		job  *v1alpha1.TrainingJob
		pods []*corev1.Pod
		want []string
	}{{
		name: "MPI: Launcher first, as in the hostfile",
		job:  mpi,
		pods: []*corev1.Pod{jobPod("m", v1alpha1.ReplicaWorker, 1, "n1", 1, ""), terminating, jobPod("m", v1alpha1.ReplicaLauncher, 0, "n1", 0, "")},
		want: []string{"0 m-launcher-0 Running", "1 m-worker-0 Terminating", "2 m-worker-1 Running"},
	}, {
		name: "TensorFlow: Chief, PS, Workers",
		job:  tf,
		pods: []*corev1.Pod{jobPod("tf", v1alpha1.ReplicaWorker, 1, "n1", 1, ""), jobPod("tf", v1alpha1.ReplicaPS, 0, "n1", 0, ""), jobPod("tf", v1alpha1.ReplicaChief, 0, "n1", 1, "")},
		want: []string{"0 tf-chief-0 Running", "1 tf-ps-0 Running", "3 tf-worker-1 Running"},
	}, {
		name: "pods beyond the spec have no rank and come last",
		job:  tf,
		pods: []*corev1.Pod{jobPod("tf", v1alpha1.ReplicaWorker, 5, "n1", 1, ""), jobPod("tf", v1alpha1.ReplicaEvaluator, 0, "n1", 1, ""), jobPod("tf", v1alpha1.ReplicaWorker, 0, "n1", 1, "")},
		want: []string{"2 tf-worker-0 Running", "- tf-evaluator-0 Running", "- tf-worker-5 Running"},
	}}
	tree, err := capacity.Build(lockstep.DefaultLevels(), []capacity.Node{{Name: "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods := make([]corev1.Pod, len(tc.pods))
			for i, p := range tc.pods {
				pods[i] = *p
			}
			var got []string
			for _, r := range buildPlacementReport(tc.job, pods, tree, nil).Ranks {
				rank := "-"
				if r.Rank != nil {
					rank = strconv.Itoa(int(*r.Rank))
				}
				got = append(got, rank+" "+r.Pod+" "+r.Phase)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ranks (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"kubectl lockstep [command]", "convert ", "placement ", "topology "}},
		{[]string{"topology", "--help"}, []string{"kubectl lockstep topology [--level LEVEL | --depth N] [-l SELECTOR]", "kubectl lockstep topology --depth 2", "--kubeconfig string", "-l, --selector string", "--topology-config string", "-o, --output string"}},
		{[]string{"placement", "--help"}, []string{"kubectl lockstep placement JOB [-n NAMESPACE]", "kubectl lockstep placement llama -n ml -o json", "-n, --namespace string", "--context string"}},
	}
	for _, tc := range tests {
		stdout, _, err := runWith(t, fakeCluster(t), tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v lacks %q:\n%s", tc.args, want, stdout)
			}
		}
	}
}

// TestPlacementComputeDomain: a multi-node NVLink job's ComputeDomain and
// its readiness follow the efficiency.
func TestPlacementComputeDomain(t *testing.T) {
	for _, tc := range []struct {
		ready bool
		want  string
	}{
		{ready: true, want: "ComputeDomain:    llama-compute-domain (ready)\n"},
		{ready: false, want: "ComputeDomain:    llama-compute-domain (not ready: see the job's ComputeDomainReady condition)\n"},
	} {
		status := v1alpha1.TrainingJobStatus{State: v1alpha1.JobRunning, Placement: &v1alpha1.Placement{
			Domain: "clique=c1", LevelName: "clique", LevelsSpanned: 1, Nodes: []string{"n1"}, Efficiency: "1.000",
			ComputeDomain: &v1alpha1.PlacementComputeDomain{Name: "llama-compute-domain", Ready: tc.ready},
		}}
		stdout, stderr, err := runWith(t, fakeCluster(t, hgxNode("n1", "leaf-a"), pytorchJob("llama", 0, status),
			jobPod("llama", v1alpha1.ReplicaMaster, 0, "n1", 4, "0,1,2,3")), "placement", "llama", "-n", "ml")
		if err != nil {
			t.Fatalf("placement: %v\n%s", err, stderr)
		}
		after, found := strings.CutPrefix(stdout[strings.Index(stdout, "Efficiency:"):], "Efficiency:       1.000\n")
		if !found || !strings.HasPrefix(after, tc.want) {
			t.Errorf("stdout:\n%s\nwant after the efficiency:\n%s", stdout, tc.want)
		}
	}
}

// TestPlacementDevices: a DRA gang's ranks show the devices status.placement
// records for them, by driver, and are rated on the GPUs the agent reports
// for their claims; a job without DRA devices has no DEVICES column
// (TestPlacementCommand).
func TestPlacementDevices(t *testing.T) {
	p, _ := topology.LookupProfile("hgx-h100")
	hw, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	withSpec := func(node, pod string, gpus ...int32) *v1alpha1.NodeTopology {
		nt := nodeTopology(node, nil, map[string][]int32{pod: gpus})
		nt.Spec = v1alpha1.SpecFromTopology(hw, "hgx-h100")
		return nt
	}
	status := v1alpha1.TrainingJobStatus{State: v1alpha1.JobRunning, Placement: &v1alpha1.Placement{
		Domain: "spine=s1/leaf=leaf-a", LevelName: "leaf", LevelsSpanned: 1, Nodes: []string{"n1", "n2"},
		BusBandwidthMBps: 50000, Efficiency: "0.111",
		ComputeDomain: &v1alpha1.PlacementComputeDomain{Name: "llama-compute-domain", Ready: true},
		Devices: []v1alpha1.PodDevices{
			{Pod: "llama-master-0", Node: "n1", Devices: []string{"compute-domain.nvidia.com/n1/channel-0", "gpu.nvidia.com/n1/gpu-4", "gpu.nvidia.com/n1/gpu-5", "gpu.nvidia.com/n1/gpu-6", "gpu.nvidia.com/n1/gpu-7"}},
			{Pod: "llama-worker-0", Node: "n2", Devices: []string{"gpu.nvidia.com/n2/gpu-0", "gpu.nvidia.com/n2/gpu-1", "gpu.nvidia.com/n2/gpu-2", "gpu.nvidia.com/n2/gpu-3"}},
		},
	}}
	c := fakeCluster(t,
		hgxNode("n1", "leaf-a"), hgxNode("n2", "leaf-a"),
		pytorchJob("llama", 1, status),
		jobPod("llama", v1alpha1.ReplicaMaster, 0, "n1", 0, ""),
		jobPod("llama", v1alpha1.ReplicaWorker, 0, "n2", 0, ""),
		withSpec("n1", "llama-master-0", 4, 5, 6, 7), withSpec("n2", "llama-worker-0", 0, 1, 2, 3),
	)
	stdout, stderr, err := runWith(t, c, "placement", "llama", "-n", "ml")
	if err != nil {
		t.Fatalf("placement: %v\n%s", err, stderr)
	}
	want := `TrainingJob:      ml/llama
Framework:        PyTorch
State:            Running
Placement:        spine=s1/leaf=leaf-a (level leaf, 2 nodes)
Levels spanned:   1
Bus bandwidth:    50.0 GB/s (modelled all-reduce bus bandwidth)
Efficiency:       0.111
ComputeDomain:    llama-compute-domain (ready)
Rated here:       0.111 in spine=s1/leaf=leaf-a, 1 levels spanned (status agrees)
  Why:            on 2 nodes in leaf leaf-a; GPUs 4,5,6,7 of node n1 get 50.0 GB/s each of NIC bandwidth, against 450.0 GB/s for the best placement

RANK   POD              ROLE     STATUS    NODE   GPUS      LEAF     SPINE   DEVICES
0      llama-master-0   Master   Running   n1     4,5,6,7   leaf-a   s1      compute-domain.nvidia.com: channel-0; gpu.nvidia.com: gpu-4,gpu-5,gpu-6,gpu-7
1      llama-worker-0   Worker   Running   n2     0,1,2,3   leaf-a   s1      gpu.nvidia.com: gpu-0,gpu-1,gpu-2,gpu-3
`
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("stdout (-want,+got):\n%s", diff)
	}
}

func TestFormatDevices(t *testing.T) {
	for _, tc := range []struct {
		node    string
		devices []string
		want    string
	}{
		{node: "n1", devices: nil, want: ""},
		{node: "n1", devices: []string{"gpu.nvidia.com/n1/gpu-0", "gpu.nvidia.com/n1/gpu-1"}, want: "gpu.nvidia.com: gpu-0,gpu-1"},
		{node: "n1", devices: []string{"compute-domain.nvidia.com/n1/channel-0", "gpu.nvidia.com/n1/gpu-3"}, want: "compute-domain.nvidia.com: channel-0; gpu.nvidia.com: gpu-3"},
		{node: "n1", devices: []string{"gpu.nvidia.com/shared-pool/gpu-3"}, want: "gpu.nvidia.com/shared-pool: gpu-3"},
		{node: "n1", devices: []string{"odd"}, want: "odd"},
	} {
		if got := formatDevices(tc.node, tc.devices); got != tc.want {
			t.Errorf("formatDevices(%s, %v) = %q, want %q", tc.node, tc.devices, got, tc.want)
		}
	}
}
