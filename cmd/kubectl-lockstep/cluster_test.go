package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// fakeCluster is a connector serving objs from fake clients: core objects
// from a fake clientset, ours, PodGroups and DRA objects from a fake dynamic
// client.
func fakeCluster(t *testing.T, objs ...runtime.Object) connector {
	t.Helper()
	return fakeClusterReacting(t, nil, objs...)
}

// fakeClusterReacting is fakeCluster with react, when not nil, called on
// each fake dynamic client made, to add reactors (errors the API returns).
func fakeClusterReacting(t *testing.T, react func(*dynamicfake.FakeDynamicClient), objs ...runtime.Object) connector {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := schedv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := resourcev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var core, custom []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Node, *corev1.Pod:
			core = append(core, o)
		default:
			custom = append(custom, o)
		}
	}
	return func(flags *genericclioptions.ConfigFlags) (*cluster, error) {
		ns := "default"
		if flags.Namespace != nil && *flags.Namespace != "" {
			ns = *flags.Namespace
		}
		dyn := dynamicfake.NewSimpleDynamicClient(scheme, custom...)
		if react != nil {
			react(dyn)
		}
		return &cluster{core: kubefake.NewClientset(core...).CoreV1(), dynamic: dyn, namespace: ns}, nil
	}
}

// runWith runs the plugin with args against connect.
func runWith(t *testing.T, connect connector, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand(strings.NewReader(""), &out, &errOut, connect)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// hgxNode is an 8-GPU node in leaf of spine s1.
func hgxNode(name, leaf string) *corev1.Node {
	labels := map[string]string{"lockstep.dev/pool": "h100", lockstep.LabelFabricTier1: "s1"}
	if leaf != "" {
		labels[lockstep.LabelFabricTier0] = leaf
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{lockstep.GPUResource: resource.MustParse("8")}},
	}
}

// gpuPod is a pod bound to node requesting gpus GPUs.
func gpuPod(ns, name, node string, gpus int64, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "c",
			// Requests as the API server defaults them from the limits of an
			// extended resource.
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
				Limits:   corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
			},
		}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// jobPod is pod index of role of job, as the controller labels it.
func jobPod(job string, role v1alpha1.ReplicaType, index int, node string, gpus int64, gpuList string) *corev1.Pod {
	p := gpuPod("ml", job+"-"+strings.ToLower(string(role))+"-"+strconv.Itoa(index), node, gpus, corev1.PodRunning)
	p.Labels = map[string]string{lockstep.LabelJobName: job, lockstep.LabelReplicaType: string(role), lockstep.LabelReplicaIndex: strconv.Itoa(index)}
	if gpuList != "" {
		p.Annotations = map[string]string{lockstep.AnnotationGPUs: gpuList}
	}
	return p
}

// nodeTopology is an 8-GPU NodeTopology with the given unhealthy GPUs and
// allocations (pod name → GPUs, in namespace ml).
func nodeTopology(node string, unhealthy []int32, allocations map[string][]int32) *v1alpha1.NodeTopology {
	nt := &v1alpha1.NodeTopology{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       v1alpha1.NodeTopologySpec{Profile: "hgx-h100", GPUCount: 8},
	}
	for _, i := range unhealthy {
		nt.Status.GPUHealth = append(nt.Status.GPUHealth, v1alpha1.GPUHealth{Index: i, State: v1alpha1.GPULost})
	}
	for pod, gpus := range allocations {
		nt.Status.Allocations = append(nt.Status.Allocations, v1alpha1.GPUAllocation{Namespace: "ml", Pod: pod, PodUID: "uid-" + pod, GPUs: gpus})
	}
	return nt
}

func pytorchJob(name string, workers int32, status v1alpha1.TrainingJobStatus) *v1alpha1.TrainingJob {
	return utiltesting.MakeTrainingJob(name, "ml").Framework(v1alpha1.FrameworkPyTorch).
		Replicas(v1alpha1.ReplicaMaster, 1).Replicas(v1alpha1.ReplicaWorker, workers).WithStatus(status).Obj()
}
