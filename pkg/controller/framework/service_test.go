package framework

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestHeadlessService(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).DefaultedObj()
	selector := map[string]string{"lockstep.dev/job-name": "train"}
	want := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
		Spec: corev1.ServiceSpec{
			Selector:                 map[string]string{"lockstep.dev/job-name": "train"},
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
		},
	}
	if diff := cmp.Diff(want, NewHeadlessService(job, selector)); diff != "" {
		t.Errorf("Service (-want,+got):\n%s", diff)
	}
}

// rendezvousJobs are jobs of every framework with several pods per role.
func rendezvousJobs() map[string]*v1alpha1.TrainingJob {
	return map[string]*v1alpha1.TrainingJob{
		"PyTorch": makeJob(v1alpha1.FrameworkPyTorch).
			Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).DefaultedObj(),
		"PyTorch elastic": makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 3, tpl("pytorch")).
			ElasticPolicy(v1alpha1.ElasticPolicy{}).DefaultedObj(),
		"TensorFlow": makeJob(v1alpha1.FrameworkTensorFlow).
			Role(v1alpha1.ReplicaChief, 1, tpl("tensorflow")).Role(v1alpha1.ReplicaPS, 2, tpl("tensorflow")).
			Role(v1alpha1.ReplicaWorker, 3, tpl("tensorflow")).DefaultedObj(),
		"MPI":     mpiJob(3).DefaultedObj(),
		"JAX":     makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 3, tpl("jax")).DefaultedObj(),
		"XGBoost": makeJob(v1alpha1.FrameworkXGBoost).Role(v1alpha1.ReplicaMaster, 1, tpl("xgboost")).Role(v1alpha1.ReplicaWorker, 3, tpl("xgboost")).DefaultedObj(),
		"Paddle":  makeJob(v1alpha1.FrameworkPaddle).Role(v1alpha1.ReplicaWorker, 3, tpl("paddle")).DefaultedObj(),
		"Paddle parameter server": makeJob(v1alpha1.FrameworkPaddle).
			Role(v1alpha1.ReplicaMaster, 1, tpl("paddle")).Role(v1alpha1.ReplicaWorker, 2, tpl("paddle")).DefaultedObj(),
	}
}

// TestPodsResolveThroughService checks that every pod is a DNS name of the
// job's Service (hostname its name, subdomain the Service) and that every
// peer address a framework writes into the environment or the MPI hostfile
// is one of those names: bare (resolved through the search domain) or
// <pod>.<service>.<namespace>.svc.
func TestPodsResolveThroughService(t *testing.T) {
	registry := NewBuiltinRegistry(fixedRandom())
	for name, job := range rendezvousJobs() {
		t.Run(name, func(t *testing.T) {
			a, err := registry.For(job.Spec.Framework)
			if err != nil {
				t.Fatal(err)
			}
			hostnames := map[string]bool{}
			var pods []*corev1.PodTemplateSpec
			for _, role := range a.Roles() {
				for i := range replicasOf(job, role) {
					pod := podTemplate(t, a, job, role, i)
					want := [2]string{PodName(job.Name, role, i, NameIncarnation(a, job)), ServiceName(job.Name)}
					if diff := cmp.Diff(want, [2]string{pod.Spec.Hostname, pod.Spec.Subdomain}); diff != "" {
						t.Errorf("%s %d [hostname subdomain] (-want,+got):\n%s", role, i, diff)
					}
					hostnames[pod.Spec.Hostname] = true
					pods = append(pods, pod)
				}
			}
			suffix := "." + ServiceName(job.Name) + "." + job.Namespace + ".svc"
			check := func(where, addr string) {
				host := strings.TrimSuffix(addr, suffix)
				if !hostnames[host] {
					t.Errorf("%s names %q, which is no pod of the job's Service (hostnames %v)", where, addr, hostnames)
				}
			}
			seen := 0
			for _, pod := range pods {
				for _, c := range pod.Spec.Containers {
					for _, addr := range peerAddresses(t, c.Env) {
						check(pod.Spec.Hostname+" env", addr)
						seen++
					}
				}
			}
			if aux, err := a.AuxObjects(job); err != nil {
				t.Fatal(err)
			} else {
				for _, o := range aux {
					if cm, ok := o.Object.(*corev1.ConfigMap); ok {
						for _, line := range strings.Split(strings.TrimSpace(cm.Data[mpiHostfileKey]), "\n") {
							check("hostfile", strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == ':' })[0])
							seen++
						}
					}
				}
			}
			if seen == 0 {
				t.Error("no peer address found to check")
			}
		})
	}
}

// peerAddresses are the hosts the framework variables in env name.
func peerAddresses(t *testing.T, env []corev1.EnvVar) []string {
	t.Helper()
	var out []string
	hostOf := func(hostPort string) string {
		host, _, err := net.SplitHostPort(hostPort)
		if err != nil {
			t.Errorf("%q is not host:port: %v", hostPort, err)
		}
		return host
	}
	for _, v := range env {
		switch v.Name {
		case "MASTER_ADDR", "PET_MASTER_ADDR", "COORDINATOR_ADDRESS":
			out = append(out, v.Value)
		case "WORKER_ADDRS":
			out = append(out, strings.Split(v.Value, ",")...)
		case "PET_RDZV_ENDPOINT":
			out = append(out, hostOf(v.Value))
		case "PADDLE_MASTER":
			if !strings.HasPrefix(v.Value, "$(") { // the endpoint pod's own IP
				out = append(out, hostOf(v.Value))
			}
		case "TF_CONFIG":
			var cfg tfConfig
			if err := json.Unmarshal([]byte(v.Value), &cfg); err != nil {
				t.Fatalf("TF_CONFIG: %v", err)
			}
			for _, hosts := range cfg.Cluster {
				for _, h := range hosts {
					out = append(out, hostOf(h))
				}
			}
		}
	}
	return out
}
