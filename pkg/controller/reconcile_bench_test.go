package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// BenchmarkReconcileRunningJobs reconciles running jobs, one per op, round
// robin over 1,000 PyTorch jobs of 8 pods (8 GPUs each), all bound, running
// and summarized, on clusters of 2,500 and 25,000 8-GPU nodes under a
// leaf/spine fabric, each with its NodeTopology. A pass in this steady
// state writes nothing (the benchmark fails if one does), so what it
// measures is the reading and deciding of a reconcile.
//
// The reconciler reads through a real controller-runtime informer cache,
// as in the manager, with its deep copies; the informers list and watch a
// fake client in place of an apiserver, and writes go to that client. The
// cluster's size must not show in the allocations of a reconcile.
func BenchmarkReconcileRunningJobs(b *testing.B) {
	benchmarkReconcile(b, true)
}

// BenchmarkReconcilePendingJobs reconciles pending jobs, one per op, round
// robin over 1,000 PyTorch jobs of 8 pods whose pods were created and wait
// to be scheduled, on the clusters of BenchmarkReconcileRunningJobs. A
// pending gang is reconciled on every event of each of its pods, and each
// pass checks the gang against the cluster's GPUs: the cluster's size must
// not show in its time or allocations. A pass writes nothing here either.
func BenchmarkReconcilePendingJobs(b *testing.B) {
	benchmarkReconcile(b, false)
}

// benchmarkReconcile reconciles 1,000 jobs, running or pending, round
// robin on each cluster size, and fails if a pass writes.
func benchmarkReconcile(b *testing.B, running bool) {
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	defer cancel()
	for _, nodes := range []int{2500, 25000} {
		// Built once: the sub-benchmark runs again for each b.N tried.
		var env *reconcileBench
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			if env == nil {
				env = newReconcileBench(ctx, b, nodes, 1000, running)
			}
			env.writes.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := env.r.Reconcile(ctx, env.jobs[i%len(env.jobs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := env.writes.Load(); n > 0 {
				b.Fatalf("%d writes while reconciling jobs (running: %t); want none in the steady state", n, running)
			}
		})
	}
}

// reconcileBench is a cluster of jobs and a reconciler on it.
type reconcileBench struct {
	r    *TrainingJobReconciler
	jobs []ctrl.Request
	// writes counts the writes to the apiserver once the jobs run.
	writes atomic.Int64
}

// newReconcileBench builds a cluster of nodes 8-GPU nodes (32 per leaf, 16
// leaves per spine) and jobs 8-pod jobs spread over 50 namespaces, running
// or, with running false, with their pods created and waiting.
func newReconcileBench(ctx context.Context, b *testing.B, nodes, jobs int, running bool) *reconcileBench {
	b.Helper()
	scheme := fakeScheme(b)
	env := &reconcileBench{}
	count := func() { env.writes.Add(1) }
	objs := make([]client.Object, 0, 2*nodes+jobs)
	spec := hgxSpec(b)
	for i := range nodes {
		n := benchNode(i)
		objs = append(objs, n, &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Spec: *spec.DeepCopy()})
	}
	for i := range jobs {
		job := utiltesting.MakeTrainingJob(fmt.Sprintf("job-%d", i), fmt.Sprintf("team-%d", i%50)).Framework(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, envtestTemplate(8)).Role(v1alpha1.ReplicaWorker, 7, envtestTemplate(8)).Obj()
		job.UID = types.UID(fmt.Sprintf("uid-%d", i))
		job.Default()
		objs = append(objs, job)
		env.jobs = append(env.jobs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: job.Name}})
	}
	// A plain tracker: the field-managed one builds a RESTMapper per write.
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				count()
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count()
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				count()
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				count()
				return c.Delete(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				count()
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()

	informers, err := cache.New(&rest.Config{Host: "http://127.0.0.1:1"}, cache.Options{
		Scheme: scheme,
		Mapper: benchRESTMapper(scheme),
		// The fake client stands in for the apiserver.
		NewInformer: func(_ toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(fakeListWatch(b, api, scheme, obj), obj, resync, indexers)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not start")
	}
	r := &TrainingJobReconciler{
		Client:   cachedClient{WithWatch: api, reader: informers},
		Recorder: &record.FakeRecorder{}, Registry: framework.NewBuiltinRegistry(rand.Reader), Clock: clock.RealClock{},
		SchedulerName: lockstep.SchedulerName, ClusterDomain: DefaultClusterDomain, CreateParallelism: 8,
		Topology: lockstep.DefaultTopologyConfig(),
	}
	r.expectations = newExpectations(r.Clock)
	if err := benchWatchNodeSet(ctx, r, informers); err != nil {
		b.Fatal(err)
	}
	env.r = r

	// Each job: its pods created, then bound to 8 nodes of one leaf and
	// running, then summarized. One job at a time, waiting for the cache
	// to catch up: the fake client's watches hold 100 events.
	// cached waits until the cache holds the job as the apiserver does: a
	// reconcile that read an older copy would have its status write
	// refused as a conflict and leave the job for a retry.
	cached := func(req ctrl.Request) *v1alpha1.TrainingJob {
		var want v1alpha1.TrainingJob
		if err := api.Get(ctx, req.NamespacedName, &want); err != nil {
			b.Fatal(err)
		}
		waitFor(b, "the status of "+req.String(), func() bool {
			var j v1alpha1.TrainingJob
			return informers.Get(ctx, req.NamespacedName, &j) == nil && j.ResourceVersion == want.ResourceVersion
		})
		return &want
	}
	for i, req := range env.jobs {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
		cached(req)
		var pods corev1.PodList
		waitFor(b, "the pods of "+req.String(), func() bool {
			return informers.List(ctx, &pods, client.InNamespace(req.Namespace), client.MatchingLabels{lockstep.LabelJobName: req.Name}) == nil &&
				len(pods.Items) == 8
		})
		if !running {
			// A second pass sees its pods and writes what it observed.
			if _, err := r.Reconcile(ctx, req); err != nil {
				b.Fatal(err)
			}
			cached(req)
			continue
		}
		for k := range pods.Items {
			p := &pods.Items[k]
			p.Spec.NodeName = benchNodeName((i*8 + k) % nodes)
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, lockstep.AnnotationGPUs, "0,1,2,3,4,5,6,7")
			if err := api.Update(ctx, p); err != nil {
				b.Fatal(err)
			}
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			if err := api.Status().Update(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		last := pods.Items[7].ResourceVersion
		waitFor(b, "the running pods of "+req.String(), func() bool {
			var p corev1.Pod
			return informers.Get(ctx, client.ObjectKeyFromObject(&pods.Items[7]), &p) == nil && p.ResourceVersion == last
		})
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
		want := cached(req)
		if want.Status.Placement == nil || want.Status.Placement.Efficiency == "" ||
			!meta.IsStatusConditionTrue(want.Status.Conditions, string(v1alpha1.JobRunning)) {
			b.Fatalf("%s: placement %+v, %s; want running and rated", req, want.Status.Placement, describeJob(want))
		}
	}
	return env
}

// benchWatchNodeSet has the placement cache follow the informer's Node
// events, as SetupWithManager does.
func benchWatchNodeSet(ctx context.Context, r *TrainingJobReconciler, informers cache.Informers) error {
	return r.watchNodeSet(ctx, informers)
}

// waitFor polls cond for up to a minute.
func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("waiting for %s", what)
		}
	}
}

// cachedClient reads from the informer cache and writes to the fake
// apiserver, as the manager's client does.
type cachedClient struct {
	client.WithWatch
	reader client.Reader
}

func (c cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}

func (c cachedClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.reader.List(ctx, list, opts...)
}

// fakeListWatch lists and watches obj's kind on the fake client.
func fakeListWatch(b *testing.B, c client.WithWatch, scheme *runtime.Scheme, obj runtime.Object) *toolscache.ListWatch {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		b.Fatal(err)
	}
	newList := func() client.ObjectList {
		l, err := scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			b.Fatal(err)
		}
		return l.(client.ObjectList)
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			l := newList()
			return l, c.List(ctx, l)
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, newList())
		},
	}
}

// benchRESTMapper maps every kind of scheme, so the cache asks no
// apiserver for discovery.
func benchRESTMapper(scheme *runtime.Scheme) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	clusterScoped := map[string]bool{"Node": true, "Namespace": true, "NodeTopology": true, "PriorityClass": true}
	for gvk := range scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		scope := meta.RESTScopeNamespace
		if clusterScoped[gvk.Kind] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	return m
}

func benchNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// benchNode is an 8-GPU node as the kubelet and GPU feature discovery
// publish it: fabric and GPU labels, capacity, conditions, addresses,
// images.
func benchNode(i int) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("7Ti"),
		lockstep.GPUResource: resource.MustParse("8"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: benchNodeName(i), Labels: hgxLabels(fmt.Sprintf("leaf-%d", i/32), fmt.Sprintf("spine-%d", i/512))},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)}, {Type: corev1.NodeHostName, Address: benchNodeName(i)}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.34.0", ContainerRuntimeVersion: "containerd://2.0.0", OSImage: "Ubuntu 24.04", Architecture: "amd64"},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		status := corev1.ConditionFalse
		if c == corev1.NodeReady {
			status = corev1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: status, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	}
	for k := range 10 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("nvcr.io/nvidia/pytorch:24.%02d-py3", k)}, SizeBytes: 10 << 30})
	}
	n.Labels[corev1.LabelHostname] = n.Name
	return n
}
