package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// TestRankNamesHaveEndpoints checks that every rank's DNS name resolves on
// a real control plane: the job's headless Service selects its pods, so the
// EndpointSlice controller (kube-controller-manager's, enabled by default)
// publishes an endpoint per pod with the pod's hostname, which is what
// <pod>.<service>.<namespace>.svc resolves through. The names the
// frameworks put in the environment (MASTER_ADDR, TF_CONFIG, the MPI
// hostfile) must be among them. A Service that lost its selector, as one
// made by an older controller, gets it back.
func TestRankNamesHaveEndpoints(t *testing.T) {
	cases := []struct {
		name      string
		framework v1alpha1.Framework
		container string
		replicas  map[v1alpha1.ReplicaType]int32
	}{
		{"pytorch", v1alpha1.FrameworkPyTorch, "pytorch", map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaMaster: 1, v1alpha1.ReplicaWorker: 3}},
		{"tensorflow", v1alpha1.FrameworkTensorFlow, "tensorflow", map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaChief: 1, v1alpha1.ReplicaPS: 1, v1alpha1.ReplicaWorker: 2}},
		{"mpi", v1alpha1.FrameworkMPI, "mpi", map[v1alpha1.ReplicaType]int32{v1alpha1.ReplicaLauncher: 1, v1alpha1.ReplicaWorker: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := cluster.NewNamespace(t)
			w := utiltesting.MakeTrainingJob("ranks", ns).Framework(tc.framework).RunPolicy(v1alpha1.RunPolicy{})
			for role, n := range tc.replicas {
				w.Role(role, n, gpuTemplate(tc.container, 1).Obj())
			}
			job := w.Obj()
			createJob(t, job)
			n := 0
			for _, r := range tc.replicas {
				n += int(r)
			}
			pods := waitPods(t, ns, job.Name, n, time.Minute)

			svc, err := cluster.Clientset.CoreV1().Services(ns).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{lockstep.LabelJobName: job.Name}; !maps.Equal(svc.Spec.Selector, want) ||
				svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
				t.Fatalf("Service %s: selector %v clusterIP %q publishNotReadyAddresses %v; want selector %v, headless, publishing unready pods",
					svc.Name, svc.Spec.Selector, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses, want)
			}
			hostnames := waitRankEndpoints(t, ns, svc.Name, pods)

			// Every peer name a framework wrote is a published hostname.
			suffix := "." + svc.Name + "." + ns + ".svc"
			addrs := map[string]bool{}
			for _, p := range pods {
				for _, a := range envPeerAddresses(t, p) {
					addrs[a] = true
				}
			}
			if tc.framework == v1alpha1.FrameworkMPI {
				var cm corev1.ConfigMap
				if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: job.Name + "-config"}, &cm); err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(strings.TrimSpace(cm.Data["hostfile"]), "\n") {
					addrs[strings.Fields(line)[0]] = true
				}
			}
			if len(addrs) == 0 {
				t.Fatal("no peer address in the pods' environment")
			}
			for a := range addrs {
				if h := strings.TrimSuffix(a, suffix); !hostnames[h] {
					t.Errorf("peer address %q: %q is not a hostname of Service %s's endpoints %v", a, h, svc.Name, slices.Sorted(maps.Keys(hostnames)))
				}
			}
			t.Logf("peer addresses %v resolve through endpoints %v", slices.Sorted(maps.Keys(addrs)), slices.Sorted(maps.Keys(hostnames)))

			if tc.framework != v1alpha1.FrameworkPyTorch {
				return
			}
			// A Service without a selector, as an older controller made it,
			// gets one on the job's next reconcile.
			svc.Spec.Selector = nil
			if _, err := cluster.Clientset.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("removing the selector: %v", err)
			}
			touchJob(t, ns, job.Name)
			err = localcluster.Poll(ctx, 100*time.Millisecond, 30*time.Second, "the Service's selector restored", func(ctx context.Context) (bool, error) {
				s, err := cluster.Clientset.CoreV1().Services(ns).Get(ctx, job.Name, metav1.GetOptions{})
				return err == nil && s.Spec.Selector[lockstep.LabelJobName] == job.Name, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			waitRankEndpoints(t, ns, svc.Name, pods)
		})
	}
}

// touchJob annotates the job, which reconciles it.
func touchJob(t *testing.T, ns, name string) {
	t.Helper()
	job := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.lockstep.dev/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if err := cluster.Client.Patch(context.Background(), job, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("annotating TrainingJob %s: %v", name, err)
	}
}

// waitRankEndpoints waits until the Service's EndpointSlices hold, for every
// pod and nothing else, an endpoint with the pod's hostname and IP that
// refers to the pod, and returns the hostnames.
func waitRankEndpoints(t *testing.T, ns, service string, pods map[string]corev1.Pod) map[string]bool {
	t.Helper()
	var missing []string
	hostnames := map[string]bool{}
	err := localcluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, "an endpoint per rank of Service "+service, func(ctx context.Context) (bool, error) {
		list, err := cluster.Clientset.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, nil
		}
		byPod := map[string]discoveryv1.Endpoint{}
		clear(hostnames)
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef == nil || e.TargetRef.Kind != "Pod" {
					missing = []string{fmt.Sprintf("endpoint %v has no pod", e.Addresses)}
					return false, nil
				}
				byPod[e.TargetRef.Name] = e
				if e.Hostname != nil {
					hostnames[*e.Hostname] = true
				}
			}
		}
		missing = nil
		for name, p := range pods {
			e, ok := byPod[name]
			switch {
			case !ok:
				missing = append(missing, name+": no endpoint")
			case e.Hostname == nil || *e.Hostname != p.Spec.Hostname || p.Spec.Hostname == "":
				missing = append(missing, fmt.Sprintf("%s: endpoint hostname %v, pod hostname %q", name, ptr.Deref(e.Hostname, "<nil>"), p.Spec.Hostname))
			case p.Status.PodIP == "" || !slices.Contains(e.Addresses, p.Status.PodIP):
				missing = append(missing, fmt.Sprintf("%s: endpoint addresses %v, pod IP %q", name, e.Addresses, p.Status.PodIP))
			}
		}
		for name := range byPod {
			if _, ok := pods[name]; !ok {
				missing = append(missing, name+": endpoint of a pod not the job's")
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, missing)
	}
	return hostnames
}

// envPeerAddresses are the hosts a pod's framework variables name.
func envPeerAddresses(t *testing.T, p corev1.Pod) []string {
	t.Helper()
	var out []string
	hostOf := func(hostPort string) string {
		host, _, err := net.SplitHostPort(hostPort)
		if err != nil {
			t.Errorf("pod %s: %q is not host:port: %v", p.Name, hostPort, err)
		}
		return host
	}
	for _, c := range p.Spec.Containers {
		for _, v := range c.Env {
			switch v.Name {
			case "MASTER_ADDR", "PET_MASTER_ADDR", "COORDINATOR_ADDRESS":
				out = append(out, v.Value)
			case "WORKER_ADDRS":
				out = append(out, strings.Split(v.Value, ",")...)
			case "PET_RDZV_ENDPOINT":
				out = append(out, hostOf(v.Value))
			case "TF_CONFIG":
				var cfg struct {
					Cluster map[string][]string `json:"cluster"`
				}
				if err := json.Unmarshal([]byte(v.Value), &cfg); err != nil {
					t.Fatalf("pod %s: TF_CONFIG: %v", p.Name, err)
				}
				for _, hosts := range cfg.Cluster {
					for _, h := range hosts {
						out = append(out, hostOf(h))
					}
				}
			}
		}
	}
	return out
}
