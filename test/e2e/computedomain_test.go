package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/computedomain"
	"github.com/lockstep-dev/lockstep/pkg/controller"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
	"github.com/lockstep-dev/lockstep/test/e2e/framework"
)

// TestComputeDomainGB200 is issue 28's acceptance (a) on a cluster of its
// own (test/e2e/models/gb200-14.yaml: two NVL72 cliques of six trays and
// two H100 nodes): only the multi-node NVLink trays publish a channel
// ResourceSlice; a 4-tray `clique: Required` gang gets a ComputeDomain
// before its pods, the real DynamicResources plugin allocates every pod's
// channel claim on the pod's own node, all four in one clique, the job
// reports the domain ready (condition and status.placement), and deleting
// the job removes the domain and its claim template. A job that opted out
// runs without either. A job on four trays whose GPUs NVIDIA's DRA driver
// serves, claiming them through a template, gets a ComputeDomain too, and
// its status.placement lists each pod's GPUs and channel as its claims
// were allocated. Domains are sized for what runs: an elastic job at its
// minimum and a job resized while suspended reach Running, where a domain
// of the full replica count would hold their pods for good.
func TestComputeDomainGB200(t *testing.T) {
	if !cluster.Local() {
		t.Skip("starts a local cluster of its own; this run uses $KUBECONFIG's")
	}
	ctx := context.Background()
	gb := startCluster(t, "gb200-14.yaml")

	t.Run("channel slices on the NVLink trays only", func(t *testing.T) {
		var classes resourcev1.DeviceClassList
		if err := gb.Client.List(ctx, &classes); err != nil {
			t.Fatalf("resource.k8s.io/v1 DeviceClasses: %v", err)
		}
		if !slices.ContainsFunc(classes.Items, func(c resourcev1.DeviceClass) bool { return c.Name == computedomain.ChannelDeviceClass }) {
			t.Errorf("no DeviceClass %s", computedomain.ChannelDeviceClass)
		}
		var want []string
		for _, n := range gb.Model.Nodes() {
			if n.Labels[lockstep.LabelGPUClique] != "" {
				want = append(want, n.Name)
			}
		}
		var got []string
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "a channel slice per NVLink tray", func(ctx context.Context) (bool, error) {
			var slices resourcev1.ResourceSliceList
			if err := gb.Client.List(ctx, &slices); err != nil {
				return false, err
			}
			got = got[:0]
			for _, s := range slices.Items {
				if s.Spec.Driver == computedomain.DriverName && s.Spec.NodeName != nil {
					got = append(got, *s.Spec.NodeName)
				}
			}
			return len(got) >= len(want), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("channel slices on %v, want the NVLink trays %v", got, want)
		}
	})

	ns := gb.NewNamespace(t)
	tpl := gpuTemplate("pytorch", 4).Obj()
	job := pytorchGang(ns, "nvl", 3, tpl).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
	if err := gb.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	cdName := job.Name + "-compute-domain"

	j := waitJobIn(t, gb, ns, job.Name, 2*time.Minute, "the job's ComputeDomain ready", func(j *v1alpha1.TrainingJob) bool {
		pl := j.Status.Placement
		return meta.IsStatusConditionTrue(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady) &&
			pl != nil && pl.ComputeDomain != nil && pl.ComputeDomain.Ready
	})
	if got := j.Status.Placement.ComputeDomain.Name; got != cdName {
		t.Errorf("status.placement.computeDomain.name %q, want %q", got, cdName)
	}
	u := computedomain.NewObject()
	if err := gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cdName}, u); err != nil {
		t.Fatal(err)
	}
	cd, err := computedomain.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}

	pods := jobPodsIn(t, gb, ns, job.Name)
	if len(pods) != 4 {
		t.Fatalf("%d pods, want 4", len(pods))
	}
	cliques := map[string]bool{}
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.CreationTimestamp.Before(&cd.CreationTimestamp) {
			t.Errorf("pod %s created at %v, before its ComputeDomain (%v)", p.Name, p.CreationTimestamp, cd.CreationTimestamp)
		}
		node := &corev1.Node{}
		if err := gb.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			t.Fatalf("pod %s on node %q: %v", p.Name, p.Spec.NodeName, err)
		}
		cliques[node.Labels[lockstep.LabelGPUClique]] = true
		nodes[node.Name] = true
		claim := channelClaimOf(t, gb, &p)
		alloc := claim.Status.Allocation
		if alloc == nil || len(alloc.Devices.Results) != 1 {
			t.Errorf("pod %s: claim %s allocation %+v, want one channel", p.Name, claim.Name, alloc)
			continue
		}
		res := alloc.Devices.Results[0]
		if res.Driver != computedomain.DriverName || res.Pool != node.Name || res.Device != "channel-0" {
			t.Errorf("pod %s on %s: claim %s got %s/%s/%s, want %s/%s/channel-0", p.Name, node.Name, claim.Name,
				res.Driver, res.Pool, res.Device, computedomain.DriverName, node.Name)
		}
	}
	if len(nodes) != 4 || len(cliques) != 1 || cliques[""] {
		t.Errorf("pods on nodes %v in cliques %v, want four trays of one clique", nodes, cliques)
	}
	if got := len(cd.Status.Nodes); got != 4 || !cd.Ready() {
		t.Errorf("ComputeDomain status %+v, want Ready with 4 nodes", cd.Status)
	}

	t.Run("opted out", func(t *testing.T) {
		out := pytorchGang(ns, "nvl-out", 1, tpl).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		out.Spec.Topology.ComputeDomain = v1alpha1.ComputeDomainDisabled
		if err := gb.Client.Create(ctx, out); err != nil {
			t.Fatal(err)
		}
		waitJobIn(t, gb, ns, out.Name, time.Minute, "the opted-out job running", hasCondition(v1alpha1.JobRunning, ""))
		for _, p := range jobPodsIn(t, gb, ns, out.Name) {
			if len(p.Spec.ResourceClaims) > 0 {
				t.Errorf("pod %s claims %v, want none", p.Name, p.Spec.ResourceClaims)
			}
		}
		err = gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: out.Name + "-compute-domain"}, computedomain.NewObject())
		if !apierrors.IsNotFound(err) {
			t.Errorf("ComputeDomain of the opted-out job: %v, want not found", err)
		}
	})

	t.Run("deleted with the job", func(t *testing.T) {
		if err := gb.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		err := localcluster.Poll(ctx, 200*time.Millisecond, 2*time.Minute, "the ComputeDomain and its claim template gone", func(ctx context.Context) (bool, error) {
			cdErr := gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cdName}, computedomain.NewObject())
			tmplErr := gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name + "-channel"}, &resourcev1.ResourceClaimTemplate{})
			return apierrors.IsNotFound(cdErr) && apierrors.IsNotFound(tmplErr), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	// A tray publishes one IMEX channel, and each member claims its own:
	// NVIDIA's driver serves one ComputeDomain per node and one workload
	// pod per node of a domain. Members of half a tray each must still
	// land a tray apart, and a second domain must keep off trays whose
	// channel the first holds, though half their GPUs are free.
	t.Run("half-tray members take a channel each", func(t *testing.T) {
		half := gpuTemplate("pytorch", 2).Obj()
		first := pytorchGang(ns, "half-a", 3, half).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		second := pytorchGang(ns, "half-b", 1, half).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		nodesOf := map[string][]string{}
		for _, j := range []*v1alpha1.TrainingJob{first, second} {
			if err := gb.Client.Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			waitJobIn(t, gb, ns, j.Name, 2*time.Minute, j.Name+" running with its ComputeDomain ready", func(j *v1alpha1.TrainingJob) bool {
				return meta.IsStatusConditionTrue(j.Status.Conditions, string(v1alpha1.JobRunning)) &&
					meta.IsStatusConditionTrue(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
			})
			for _, p := range jobPodsIn(t, gb, ns, j.Name) {
				nodesOf[j.Name] = append(nodesOf[j.Name], p.Spec.NodeName)
			}
		}
		seen := map[string]string{}
		for job, nodes := range nodesOf {
			for _, n := range nodes {
				if other, ok := seen[n]; ok {
					t.Errorf("node %s holds members of %s and %s, want one channel claim per node", n, other, job)
				}
				seen[n] = job
			}
		}
		for _, j := range []*v1alpha1.TrainingJob{first, second} {
			if err := gb.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
				t.Fatal(err)
			}
		}
	})

	// NVIDIA's driver holds every pod claiming a domain's channel until
	// numNodes of its IMEX daemons are ready, and so does the harness's
	// stand-in (deploy/kwok/stages.yaml): a domain sized for more nodes
	// than the gang runs on would hang it in ContainerCreating.
	domainOf := func(t *testing.T, job string) *computedomain.ComputeDomain {
		t.Helper()
		u := computedomain.NewObject()
		if err := gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job + "-compute-domain"}, u); err != nil {
			t.Fatal(err)
		}
		cd, err := computedomain.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		return cd
	}
	runningWithDomain := func(j *v1alpha1.TrainingJob) bool {
		return meta.IsStatusConditionTrue(j.Status.Conditions, string(v1alpha1.JobRunning)) &&
			meta.IsStatusConditionTrue(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady)
	}
	t.Run("an elastic job at its minimum gets a domain of what runs", func(t *testing.T) {
		// Eight Workers, a clique holds six trays: the gang of two runs, and
		// Workers join it while there is room, in its clique.
		elastic := utiltesting.MakeTrainingJob("nvl-elastic", ns).Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaWorker, 8, tpl).RunPolicy(v1alpha1.RunPolicy{}).
			ElasticPolicy(v1alpha1.ElasticPolicy{MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](8)}).
			Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		if err := gb.Client.Create(ctx, elastic); err != nil {
			t.Fatal(err)
		}
		waitJobIn(t, gb, ns, elastic.Name, 2*time.Minute, "the elastic job running with its ComputeDomain ready", runningWithDomain)
		if cd := domainOf(t, elastic.Name); cd.Spec.NumNodes != 2 || !cd.Ready() {
			t.Errorf("ComputeDomain numNodes %d (ready %v), want the gang's 2 minReplicas Workers", cd.Spec.NumNodes, cd.Ready())
		}
		running := 0
		for _, p := range jobPodsIn(t, gb, ns, elastic.Name) {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < 2 || running > 6 {
			t.Errorf("%d Workers running, want the gang's 2 to a clique's 6", running)
		}
		if err := gb.Client.Delete(ctx, elastic, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a job resized while suspended gets a domain of its new size", func(t *testing.T) {
		resized := pytorchGang(ns, "nvl-resized", 3, tpl).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		if err := gb.Client.Create(ctx, resized); err != nil {
			t.Fatal(err)
		}
		waitJobIn(t, gb, ns, resized.Name, 2*time.Minute, "the job running with its ComputeDomain ready", runningWithDomain)
		first := domainOf(t, resized.Name)
		if first.Spec.NumNodes != 4 {
			t.Fatalf("ComputeDomain numNodes %d, want the job's 4 GPU pods", first.Spec.NumNodes)
		}
		edit := func(mutate func(*v1alpha1.TrainingJob)) {
			t.Helper()
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				j := &v1alpha1.TrainingJob{}
				if err := gb.Client.Get(ctx, client.ObjectKeyFromObject(resized), j); err != nil {
					return err
				}
				mutate(j)
				return gb.Client.Update(ctx, j)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		edit(func(j *v1alpha1.TrainingJob) { j.Spec.RunPolicy.Suspend = ptr.To(true) })
		err := localcluster.Poll(ctx, 200*time.Millisecond, time.Minute, "the suspended job's pods gone", func(ctx context.Context) (bool, error) {
			return len(jobPodsIn(t, gb, ns, resized.Name)) == 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		edit(func(j *v1alpha1.TrainingJob) {
			w := j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
			w.Replicas = ptr.To[int32](1)
			j.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = w
		})
		edit(func(j *v1alpha1.TrainingJob) { j.Spec.RunPolicy.Suspend = ptr.To(false) })
		waitJobIn(t, gb, ns, resized.Name, 2*time.Minute, "the resized job running with its ComputeDomain ready", runningWithDomain)
		second := domainOf(t, resized.Name)
		if second.UID == first.UID || second.Spec.NumNodes != 2 {
			t.Errorf("ComputeDomain %s numNodes %d after the resize (first %s, %d), want a new one for the 2 GPU pods",
				second.UID, second.Spec.NumNodes, first.UID, first.Spec.NumNodes)
		}
		events, err := gb.Events(ctx, ns, "TrainingJob", resized.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(events, func(e corev1.Event) bool { return e.Reason == controller.ReasonComputeDomainResized }) {
			t.Errorf("no %s event on the job: %v", controller.ReasonComputeDomainResized, events)
		}
		if err := gb.Client.Delete(ctx, resized, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a job claiming its GPUs through DRA", func(t *testing.T) {
		trays := addDRANodesTo(t, gb, "gb200-dra", "gb200-nvl72", 4, 4)
		if err := gb.Client.Create(ctx, utiltesting.MakeGPUClaimTemplate("gpus", ns, 4)); err != nil {
			t.Fatal(err)
		}
		draTpl := utiltesting.MakePodTemplate("pytorch").NoGracePeriod().CPU("1").GPUClaim("gpus").Obj()
		dra := pytorchGang(ns, "nvl-dra", 3, draTpl).Topology(lockstep.LevelClique, v1alpha1.TopologyRequired).Obj()
		if err := gb.Client.Create(ctx, dra); err != nil {
			t.Fatal(err)
		}
		pl := waitPlacementWithDevices(t, gb, dra, 4, func(j *v1alpha1.TrainingJob) bool {
			cd := j.Status.Placement.ComputeDomain
			return meta.IsStatusConditionTrue(j.Status.Conditions, v1alpha1.ConditionComputeDomainReady) && cd != nil && cd.Ready
		})
		if got, want := pl.ComputeDomain.Name, dra.Name+"-compute-domain"; got != want {
			t.Errorf("status.placement.computeDomain.name %q, want %q", got, want)
		}
		u := computedomain.NewObject()
		if err := gb.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pl.ComputeDomain.Name}, u); err != nil {
			t.Fatal(err)
		}
		cd, err := computedomain.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		if cd.Spec.NumNodes != 4 {
			t.Errorf("ComputeDomain numNodes %d, want the job's 4 DRA-claiming pods", cd.Spec.NumNodes)
		}
		pods := checkPlacementDevices(t, gb, dra, pl)
		cliques := map[string]bool{}
		for _, p := range pods {
			if !slices.Contains(trays, p.Spec.NodeName) {
				t.Errorf("pod %s on %s, not one of the DRA trays %v", p.Name, p.Spec.NodeName, trays)
			}
			node := &corev1.Node{}
			if err := gb.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
				t.Fatal(err)
			}
			cliques[node.Labels[lockstep.LabelGPUClique]] = true
		}
		if len(cliques) != 1 || cliques[""] {
			t.Errorf("pods in cliques %v, want one", cliques)
		}
		for _, d := range pl.Devices {
			want := []string{computedomain.DriverName + "/" + d.Node + "/channel-0"}
			for _, dev := range d.Devices {
				if strings.HasPrefix(dev, lockstep.DRAGPUDriver+"/"+d.Node+"/") {
					want = append(want, dev)
				}
			}
			if len(want) != 5 || !slices.Equal(want, d.Devices) {
				t.Errorf("pod %s holds %v, want its node's channel and 4 of its node's GPUs", d.Pod, d.Devices)
			}
		}
		if pl.LevelName != "clique" {
			t.Errorf("placement at level %s (%s), want one clique", pl.LevelName, pl.Reason)
		}
	})
}

// startCluster starts a local cluster of model (under test/e2e/models)
// with our components, for a test that needs other hardware than the
// suite's; it is stopped, its logs kept on failure, when the test ends.
func startCluster(t *testing.T, model string) *framework.Cluster {
	t.Helper()
	ctx := context.Background()
	c, err := framework.Start(ctx, localcluster.Options{
		RepoRoot: cluster.RepoRoot,
		Model:    filepath.Join(cluster.RepoRoot, "test", "e2e", "models", model),
	})
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				saveArtifacts(cluster.RepoRoot, c)
			}
			if err := c.Stop(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("stopping the %s cluster: %v", model, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("starting a %s cluster: %v", model, err)
	}
	if err := c.WaitNodesReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.StartComponents(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// channelClaimOf is the ResourceClaim made for the pod's ComputeDomain
// channel from its template.
func channelClaimOf(t *testing.T, c *framework.Cluster, p *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		if err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: *s.ResourceClaimName}, claim); err != nil {
			t.Fatal(err)
		}
		return claim
	}
	t.Fatalf("pod %s has no claim made for it (status.resourceClaimStatuses %+v)", p.Name, p.Status.ResourceClaimStatuses)
	return nil
}

// jobPodsIn lists the pods of job on cluster c.
func jobPodsIn(t *testing.T, c *framework.Cluster, ns, job string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{lockstep.LabelJobName: job}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}
