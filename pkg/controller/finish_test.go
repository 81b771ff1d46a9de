package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// staleJobClient serves one stale copy of the job, as a cache that has not
// caught up with the job's last write would.
type staleJobClient struct {
	client.Client
	stale *v1alpha1.TrainingJob
}

func (c *staleJobClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if j, ok := obj.(*v1alpha1.TrainingJob); ok && c.stale != nil {
		c.stale.DeepCopyInto(j)
		c.stale = nil
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A job that finishes with cleanPodPolicy All must not lose its outcome
// when the status write that records it fails (here: the job in the cache
// is stale, so the write conflicts). Deleting the pods first would erase
// the succeeded Master, and the next pass would start the job over.
func TestFinishRecordedBeforePodsCleaned(t *testing.T) {
	scheme := fakeScheme(t)
	job := pyTorchJob("ns", "j", func(j *v1alpha1.TrainingJob) {
		j.UID = "job-uid"
		runPolicy(j).CleanPodPolicy = ptr.To(v1alpha1.CleanPodPolicyAll)
	})
	job.Default()
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(job).Build()
	r := fakeReconciler(c)
	ctx := context.Background()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil || len(pods.Items) != 4 {
		t.Fatalf("%d pods created (%v); want 4", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		p.Status.Phase = corev1.PodRunning
		if p.Name == "j-master-0" {
			p.Status.Phase = corev1.PodSucceeded
		}
		if err := c.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	// The cache holds the job as it was; the job then changes (its owner
	// labels it), so the controller's status write conflicts.
	var stale v1alpha1.TrainingJob
	if err := c.Get(ctx, req.NamespacedName, &stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"team": "a"}
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	r.Client = &staleJobClient{Client: c, stale: &stale}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	r.Client = c
	for range 3 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	var got v1alpha1.TrainingJob
	if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, string(v1alpha1.JobSucceeded)) {
		t.Errorf("job: %s; want Succeeded", describeJob(&got))
	}
	if err := c.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name+"("+string(p.Status.Phase)+")")
	}
	if len(names) > 0 {
		t.Errorf("pods %v left; want none (cleanPodPolicy All)", names)
	}
}

// A template the apiserver will not turn into a pod fails every try the
// same way. Reconcile must hand the failure back as an error, so the
// workqueue's rate limiter spaces the retries (a Requeue or a nil error
// would retry at once or never), and must say why on the job.
func TestFailedPodCreateIsRetriedWithBackoff(t *testing.T) {
	scheme := fakeScheme(t)
	job := pyTorchJob("ns", "j", func(j *v1alpha1.TrainingJob) { j.UID = "job-uid" })
	job.Default()
	refused := apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`serviceaccount "does-not-exist" not found`))
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(job).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return refused
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	r := fakeReconciler(c)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}
	for try := range 3 {
		res, err := r.Reconcile(context.Background(), req)
		if err == nil || errors.Is(err, reconcile.TerminalError(nil)) || res.Requeue || res.RequeueAfter != 0 {
			t.Fatalf("try %d: Reconcile = %+v, %v; want a plain error, for the rate limiter", try, res, err)
		}
	}
	got := &v1alpha1.TrainingJob{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, string(v1alpha1.JobCreated))
	if cond == nil || cond.Status != "False" || cond.Reason != ReasonFailedCreatePod || !strings.Contains(cond.Message, "does-not-exist") {
		t.Errorf("Created condition %+v, want False/%s naming the cause", cond, ReasonFailedCreatePod)
	}
}

// A status write that conflicts is retried soon by the reconciler itself:
// the event a newer job would bring can be lost (a dropped watch), and a
// job whose Created condition was never written would otherwise wait for
// an unrelated event.
func TestStatusConflictIsRetriedSoon(t *testing.T) {
	scheme := fakeScheme(t)
	job := pyTorchJob("ns", "j", func(j *v1alpha1.TrainingJob) { j.UID = "job-uid" })
	job.Default()
	conflicts := 1
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.TrainingJob{}).WithObjects(job).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.TrainingJob); ok && conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("trainingjobs").GroupResource(), obj.GetName(), errors.New("injected"))
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}}).Build()
	r := fakeReconciler(c)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "j"}}
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("Reconcile after a conflicting status write = %+v, %v; want a prompt requeue and no error", res, err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.TrainingJob{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, string(v1alpha1.JobCreated)) || got.Status.StartTime == nil {
		t.Errorf("status %+v after the retry, want Created and a start time", got.Status)
	}
}

// fakeScheme knows every type the reconciler reads or writes.
func fakeScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, schedv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

// fakeReconciler is a reconciler on c at t0, with the built-in adapters.
func fakeReconciler(c client.Client) *TrainingJobReconciler {
	r := &TrainingJobReconciler{
		Client: c, Recorder: record.NewFakeRecorder(100), Registry: framework.NewBuiltinRegistry(rand.Reader),
		Clock: &fakeClock{now: t0}, SchedulerName: lockstep.SchedulerName, ClusterDomain: DefaultClusterDomain,
		CreateParallelism: 4, Topology: lockstep.DefaultTopologyConfig(),
	}
	r.expectations = newExpectations(r.Clock)
	return r
}
