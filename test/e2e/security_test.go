package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// wantRefused fails unless err is an admission refusal whose message
// contains want.
func wantRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want a refusal containing %q", what, err, want)
	}
}

// TestTemplatePolicyRefuses creates TrainingJobs through the apiserver with
// deploy/'s lockstep-trainingjob-templates policy applied: each template
// that binds its pods, picks another scheduler, names another gang, sets
// the controller's per-incarnation variables or takes the host is refused,
// naming the field; the namespace label lets a
// cluster-admin allow the host-sharing ones.
func TestTemplatePolicyRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := func(name string, mutate func(*corev1.PodTemplateSpec)) *v1alpha1.TrainingJob {
		worker := gpuTemplate("pytorch", 1).Obj()
		mutate(&worker)
		return pytorchGang(ns, name, 1, gpuTemplate("pytorch", 1).Obj()).
			Role(v1alpha1.ReplicaWorker, 1, worker).
			Suspend(true). // nothing runs
			Obj()
	}
	if err := cluster.Client.Create(ctx, job("plain", func(*corev1.PodTemplateSpec) {})); err != nil {
		t.Fatalf("creating a plain TrainingJob: %v", err)
	}
	privileged := []struct {
		name, want string
		mutate     func(*corev1.PodTemplateSpec)
	}{
		{"host-network", "spec.replicaSpecs[Worker].template.spec.hostNetwork", func(p *corev1.PodTemplateSpec) { p.Spec.HostNetwork = true }},
		{"host-pid", "spec.replicaSpecs[Worker].template.spec.hostPID", func(p *corev1.PodTemplateSpec) { p.Spec.HostPID = true }},
		{"host-ipc", "spec.replicaSpecs[Worker].template.spec.hostIPC", func(p *corev1.PodTemplateSpec) { p.Spec.HostIPC = true }},
		{"privileged", "spec.replicaSpecs[Worker].template.spec.containers[pytorch].securityContext.privileged", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}},
		{"host-path", "spec.replicaSpecs[Worker].template.spec.volumes[root].hostPath", func(p *corev1.PodTemplateSpec) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}},
	}
	for _, tc := range []struct {
		name, want string
		mutate     func(*corev1.PodTemplateSpec)
	}{
		{"node-name", "spec.replicaSpecs[Worker].template.spec.nodeName: must not be set", func(p *corev1.PodTemplateSpec) {
			p.Spec.NodeName = cluster.Model.Nodes()[0].Name
		}},
		{"scheduler-name", "spec.replicaSpecs[Worker].template.spec.schedulerName: must be lockstep-scheduler", func(p *corev1.PodTemplateSpec) {
			p.Spec.SchedulerName = "default-scheduler"
		}},
		{"pod-group", "spec.replicaSpecs[Worker].template.metadata.labels[scheduling.x-k8s.io/pod-group]: must be unset or the job's name", func(p *corev1.PodTemplateSpec) {
			p.Labels = map[string]string{lockstep.PodGroupLabel: "someone-elses-gang"}
		}},
		// The fence between incarnations is the controller's to set.
		{"rendezvous-id", "spec.replicaSpecs[Worker].template.spec.containers[pytorch].env[" + lockstep.EnvRendezvousID + "]: must not be set", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: lockstep.EnvRendezvousID, Value: "mine"})
		}},
		{"incarnation", "spec.replicaSpecs[Worker].template.spec.initContainers[restore].env[" + lockstep.EnvIncarnation + "]: must not be set", func(p *corev1.PodTemplateSpec) {
			p.Spec.InitContainers = []corev1.Container{{Name: "restore", Image: "restore", Env: []corev1.EnvVar{{Name: lockstep.EnvIncarnation, Value: "0"}}}}
		}},
		// So is the checkpoint to resume from (docs/controller.md, Checkpoints).
		{"resume-from", "spec.replicaSpecs[Worker].template.spec.containers[pytorch].env[" + lockstep.EnvResumeFrom + "]: must not be set", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: lockstep.EnvResumeFrom, Value: "s3://mine"})
		}},
	} {
		err := cluster.Client.Create(ctx, job(tc.name, tc.mutate))
		wantRefused(t, "TrainingJob with "+tc.name, err, tc.want)
	}
	for _, tc := range privileged {
		err := cluster.Client.Create(ctx, job(tc.name, tc.mutate))
		wantRefused(t, "TrainingJob with "+tc.name, err, tc.want)
	}
	// An update is held to the same rules. The controller writes the job
	// meanwhile: an update of a stale copy is answered 409 before any
	// policy sees it, so read it again and retry.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		plain := &v1alpha1.TrainingJob{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, plain); err != nil {
			return err
		}
		w := plain.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
		w.Template.Spec.NodeName = cluster.Model.Nodes()[0].Name
		plain.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker] = w
		return cluster.Client.Update(ctx, plain)
	})
	wantRefused(t, "updating a TrainingJob's template to set nodeName", err, "template.spec.nodeName")

	// A cluster-admin allows privileged templates in this namespace.
	patch := []byte(`{"metadata":{"labels":{"` + lockstep.LabelAllowPrivilegedTemplates + `":"true"}}}`)
	if _, err := cluster.Clientset.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Policies see the namespace through an informer: allow it a moment.
	for _, tc := range privileged {
		err := localcluster.Poll(ctx, 200*time.Millisecond, 10*time.Second, "TrainingJob with "+tc.name+" admitted", func(ctx context.Context) (bool, error) {
			err := cluster.Client.Create(ctx, job(tc.name, tc.mutate))
			return err == nil || apierrors.IsAlreadyExists(err), nil
		})
		if err != nil {
			t.Errorf("in a namespace labelled %s=true: %v", lockstep.LabelAllowPrivilegedTemplates, err)
		}
	}
	// nodeName stays refused there.
	err = cluster.Client.Create(ctx, job("node-name", func(p *corev1.PodTemplateSpec) { p.Spec.NodeName = cluster.Model.Nodes()[0].Name }))
	wantRefused(t, "TrainingJob with nodeName in a privileged namespace", err, "template.spec.nodeName")
}

// TestControllerIdentityWritesOnlyOwnedObjects uses the controller's token
// under deploy/'s lockstep-controller-owned-objects policy: it may write
// objects a TrainingJob controls, and nothing else; it reads no Secret.
func TestControllerIdentityWritesOnlyOwnedObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	token, err := cluster.Token(ctx, localcluster.ControllerIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	ctl := newClient(t, token)

	job := pytorchJob(ns, "owner", 1)
	job.Spec.RunPolicy.Suspend = ptr.To(true)
	createJob(t, job)
	owned := func(obj client.Object, jobName string) client.Object {
		obj.SetLabels(map[string]string{lockstep.LabelJobName: jobName})
		obj.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: "lockstep.dev/v1alpha1", Kind: "TrainingJob", Name: job.Name, UID: job.UID, Controller: ptr.To(true),
		}})
		return obj
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }
	const notOwned = "may only write objects controlled by a TrainingJob"

	// Objects a TrainingJob controls: allowed.
	if err := ctl.Create(ctx, owned(&corev1.ConfigMap{ObjectMeta: meta("owner-hostfile")}, job.Name)); err != nil {
		t.Errorf("controller creating its job's ConfigMap: %v", err)
	}
	if err := ctl.Create(ctx, owned(&corev1.Secret{ObjectMeta: meta("owner-ssh")}, job.Name)); err != nil {
		t.Errorf("controller creating its job's SSH key Secret: %v", err)
	}
	// Not controlled, or labelled for another job: refused.
	wantRefused(t, "controller creating a ConfigMap no job controls",
		ctl.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("foreign")}), notOwned)
	wantRefused(t, "controller creating a Secret labelled for another job",
		ctl.Create(ctx, owned(&corev1.Secret{ObjectMeta: meta("mislabelled")}, "other")), notOwned)

	// Someone else's Service and pod: the controller can neither rewrite
	// nor delete them.
	svc := &corev1.Service{ObjectMeta: meta("someone-elses"), Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}},
	}}
	if err := cluster.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "stolen"}
	wantRefused(t, "controller updating a foreign Service", ctl.Update(ctx, svc), notOwned)
	// Adopting it does not help: the stored object is checked.
	adopt := svc.DeepCopy()
	owned(adopt, job.Name)
	wantRefused(t, "controller adopting a foreign Service", ctl.Update(ctx, adopt), "may only update or delete objects a TrainingJob already controls")
	pod := &corev1.Pod{ObjectMeta: meta("someone-elses"), Spec: corev1.PodSpec{
		SchedulerName: "no-such-scheduler", Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
	}}
	cluster.CreatePods(t, pod)
	wantRefused(t, "controller deleting a foreign pod", ctl.Delete(ctx, pod), "may only update or delete objects a TrainingJob already controls")

	// Pods it creates are held to the template rules, even when owned.
	bound := owned(&corev1.Pod{ObjectMeta: meta("bound"), Spec: corev1.PodSpec{
		NodeName: cluster.Model.Nodes()[0].Name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
	}}, job.Name)
	wantRefused(t, "controller creating a pod with nodeName", ctl.Create(ctx, bound), "may not create pods with spec.nodeName")
	hostPod := owned(&corev1.Pod{ObjectMeta: meta("host"), Spec: corev1.PodSpec{
		SchedulerName: lockstep.SchedulerName, HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
	}}, job.Name)
	wantRefused(t, "controller creating a host-network pod", ctl.Create(ctx, hostPod), "may not create privileged or host-sharing pods")
	// ...and nowhere in the system namespaces, owned or not.
	sys := owned(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "kube-system"}}, job.Name)
	wantRefused(t, "controller creating a ConfigMap in kube-system", ctl.Create(ctx, sys), "writes no objects in namespace kube-system")

	// Secrets: create only, never read (RBAC).
	if err := ctl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "owner-ssh"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("controller getting a Secret, even its own: got %v, want Forbidden", err)
	}
	if err := ctl.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Errorf("controller listing Secrets: got %v, want Forbidden", err)
	}

	// The PodGroup controller's carve-out: another operator's PodGroup's
	// status may be written, its spec not.
	pg := &schedv1alpha1.PodGroup{ObjectMeta: meta("another-operators"), Spec: schedv1alpha1.PodGroupSpec{MinMember: 2}}
	if err := cluster.Client.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	status := []byte(`{"status":{"phase":"Pending"}}`)
	if err := ctl.Status().Patch(ctx, pg, client.RawPatch(types.MergePatchType, status)); err != nil {
		t.Errorf("controller patching a foreign PodGroup's status (the PodGroup controller's job): %v", err)
	}
	if err := ctl.Patch(ctx, pg, client.RawPatch(types.MergePatchType, status)); err != nil {
		t.Errorf("controller's no-op patch of a foreign PodGroup (as the PodGroup controller sends): %v", err)
	}
	spec := []byte(`{"spec":{"minMember":1}}`)
	wantRefused(t, "controller changing a foreign PodGroup's spec",
		ctl.Patch(ctx, pg, client.RawPatch(types.MergePatchType, spec)), "may only write objects controlled by a TrainingJob")
}

// TestAgentIdentityWritesOnlyTopologyLabels uses the real agent's identity,
// a token bound to a pod on node A: it may set the contract's topology
// labels on A (lockstep.AgentNodeLabels), not any other label.
func TestAgentIdentityWritesOnlyTopologyLabels(t *testing.T) {
	ctx := context.Background()
	nodeA := cluster.Model.Nodes()[0].Name
	id := localcluster.AgentIdentity()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "identity-agent-labels-", Namespace: id.Namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: id.Name,
			NodeName:           nodeA,
			Containers:         []corev1.Container{{Name: "agent", Image: "lockstep-topology-agent"}},
		},
	}
	pod, err := cluster.Clientset.CoreV1().Pods(id.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent's pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset.CoreV1().Pods(id.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	token, err := cluster.Token(ctx, id, pod, 600)
	if err != nil {
		t.Fatal(err)
	}
	agent := newClientset(t, token)
	node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := node.Labels
	t.Cleanup(func() {
		labels := map[string]any{}
		for _, k := range append(lockstep.AgentNodeLabels(), lockstep.LabelPool, "node-role.kubernetes.io/x") {
			if v, ok := original[k]; ok {
				labels[k] = v
			} else {
				labels[k] = nil
			}
		}
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		_, _ = cluster.Clientset.CoreV1().Nodes().Patch(context.Background(), nodeA, types.MergePatchType, data, metav1.PatchOptions{})
	})
	label := func(k, v string) error {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{k: v}}})
		_, err := agent.CoreV1().Nodes().Patch(ctx, nodeA, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	if err := label(lockstep.LabelGPUProduct, "identity-test"); err != nil {
		t.Errorf("agent on %s setting %s on its node: %v", nodeA, lockstep.LabelGPUProduct, err)
	}
	for _, k := range []string{lockstep.LabelPool, "node-role.kubernetes.io/x"} {
		wantRefused(t, "agent setting "+k+" on its node", label(k, "stolen"), "may only write the node labels")
	}
}

// TestMetricsAuthorization scrapes each component's /metrics over HTTPS:
// without a token it is refused (401), with a token whose identity may not
// get /metrics too (403), and with the scraper's token (bound to deploy/'s
// lockstep-metrics-reader) it is served.
func TestMetricsAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scraper, err := cluster.Token(ctx, localcluster.MetricsScraperIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler's identity has no business reading metrics.
	stranger, err := cluster.Token(ctx, localcluster.SchedulerIdentity(), nil, 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range components {
		ep, err := cluster.Endpoints(name)
		if err != nil {
			t.Fatal(err)
		}
		if !ep.Secure || !strings.HasPrefix(ep.Metrics, "https://") {
			t.Errorf("%s serves metrics at %s, want HTTPS behind authentication", name, ep.Metrics)
			continue
		}
		// kube-scheduler lets the anonymous user through authentication and
		// refuses it at authorization (403); our binaries refuse it at
		// authentication (401).
		anonymous := http.StatusUnauthorized
		if name == "scheduler" {
			anonymous = http.StatusForbidden
		}
		for _, tc := range []struct {
			who, token string
			want       int
		}{
			{"no token", "", anonymous},
			{"an identity without get on /metrics", stranger, http.StatusForbidden},
			{"the metrics scraper", scraper, http.StatusOK},
		} {
			status, body, err := cluster.GetWithToken(ctx, ep.Metrics, tc.token)
			if err != nil {
				t.Errorf("%s: GET %s as %s: %v", name, ep.Metrics, tc.who, err)
				continue
			}
			if status != tc.want {
				t.Errorf("%s: GET %s as %s: %d, want %d (%.200s)", name, ep.Metrics, tc.who, status, tc.want, body)
			}
		}
	}
}
