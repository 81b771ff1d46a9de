package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// serviceTestJob is a defaulted PyTorch job whose templates claim another
// job's name label, which the reconciler must override.
func serviceTestJob() *v1alpha1.TrainingJob {
	tpl := utiltesting.MakePodTemplate("pytorch").Image("train:v1").Label(lockstep.LabelJobName, "someone-else").Obj()
	return utiltesting.MakeTrainingJob("train", "ml").UID("job-uid").Framework(v1alpha1.FrameworkPyTorch).
		Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, 3, tpl).DefaultedObj()
}

func serviceTestReconciler(t *testing.T, objs ...client.Object) (*TrainingJobReconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &TrainingJobReconciler{
		Client:        c,
		Recorder:      record.NewFakeRecorder(10),
		Registry:      framework.NewBuiltinRegistry(nil),
		SchedulerName: lockstep.SchedulerName,
		ClusterDomain: DefaultClusterDomain,
	}, c
}

func ownedBy(job *v1alpha1.TrainingJob) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrainingJob", Name: job.Name, UID: job.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
}

func TestEnsureService(t *testing.T) {
	job := serviceTestJob()
	wantSpec := corev1.ServiceSpec{
		Selector:                 map[string]string{lockstep.LabelJobName: "train"},
		ClusterIP:                corev1.ClusterIPNone,
		PublishNotReadyAddresses: true,
	}
	// oldService is the Service of a controller that set no selector.
	oldService := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Labels: map[string]string{lockstep.LabelJobName: "train"},
			OwnerReferences: ownedBy(job)},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Type: corev1.ServiceTypeClusterIP},
	}
	foreign := oldService.DeepCopy()
	foreign.OwnerReferences = nil
	cases := []struct {
		name     string
		existing []client.Object
		want     corev1.ServiceSpec
		wantErr  string
	}{
		{name: "created", want: wantSpec},
		{name: "older controller's Service gets its selector", existing: []client.Object{oldService},
			want: corev1.ServiceSpec{Selector: wantSpec.Selector, ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Type: corev1.ServiceTypeClusterIP}},
		{name: "someone else's Service is left alone", existing: []client.Object{foreign},
			want: foreign.Spec, wantErr: "is not the job's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, c := serviceTestReconciler(t, tc.existing...)
			ctx := context.Background()
			err := r.ensureService(ctx, job)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("ensureService: %v, want error %q", err, tc.wantErr)
			}
			var got corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ml", Name: "train"}, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Spec); diff != "" {
				t.Errorf("Service spec (-want,+got):\n%s", diff)
			}
			if tc.wantErr != "" {
				return
			}
			if diff := cmp.Diff(ownedBy(job), got.OwnerReferences); diff != "" {
				t.Errorf("owner (-want,+got):\n%s", diff)
			}
			// A second pass writes nothing.
			rv := got.ResourceVersion
			if err := r.ensureService(ctx, job); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(&got), &got); err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != rv {
				t.Errorf("second pass rewrote the Service: resourceVersion %s, was %s", got.ResourceVersion, rv)
			}
		})
	}
}

// TestServiceSelectsExactlyTheJobsPods checks that the Service's selector
// matches every pod the controller creates for the job, whatever labels the
// template carries, and not another job's pods.
func TestServiceSelectsExactlyTheJobsPods(t *testing.T) {
	job := serviceTestJob()
	other := serviceTestJob()
	other.Name = "train-2"
	other.UID = "other-uid"
	r, _ := serviceTestReconciler(t)
	svc := desiredService(job)
	a, err := r.Registry.For(job.Spec.Framework)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*v1alpha1.TrainingJob{job, other} {
		for _, role := range a.Roles() {
			spec := j.Spec.ReplicaSpecs[role]
			for i := range spec.DesiredReplicas() {
				pod, err := r.desiredPod(j, a, role, i, claimGPUs{})
				if err != nil {
					t.Fatal(err)
				}
				type dns struct{ Hostname, Subdomain string }
				if diff := cmp.Diff(dns{pod.Name, framework.ServiceName(j.Name)}, dns{pod.Spec.Hostname, pod.Spec.Subdomain}); diff != "" {
					t.Errorf("pod %s DNS (-want,+got):\n%s", pod.Name, diff)
				}
				selected := true
				for k, v := range svc.Spec.Selector {
					selected = selected && pod.Labels[k] == v
				}
				if want := j == job; selected != want {
					t.Errorf("Service %s selects pod %s: %v, want %v", svc.Name, pod.Name, selected, want)
				}
			}
		}
	}
}
