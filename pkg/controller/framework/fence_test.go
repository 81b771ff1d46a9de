package framework

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// incarnationView is what an incarnation's pods say about who they are and
// whom they meet: their hostnames, the hosts their environment and hostfile
// name, and the rendezvous IDs they carry.
type incarnationView struct {
	hostnames, peers, ids map[string]bool
}

func viewOf(t *testing.T, a Adapter, job *v1alpha1.TrainingJob) incarnationView {
	t.Helper()
	v := incarnationView{hostnames: map[string]bool{}, peers: map[string]bool{}, ids: map[string]bool{}}
	suffix := "." + ServiceName(job.Name) + "." + job.Namespace + ".svc"
	for _, role := range a.Roles() {
		for i := range replicasOf(job, role) {
			pod := podTemplate(t, a, job, role, i)
			v.hostnames[pod.Spec.Hostname] = true
			for _, c := range pod.Spec.Containers {
				for _, addr := range peerAddresses(t, c.Env) {
					v.peers[strings.TrimSuffix(addr, suffix)] = true
				}
				for _, e := range c.Env {
					if e.Name == lockstep.EnvRendezvousID || e.Name == "PADDLE_JOB_ID" {
						v.ids[e.Name+"="+e.Value] = true
					}
				}
			}
		}
	}
	aux, err := a.AuxObjects(job)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range aux {
		if cm, ok := o.Object.(*corev1.ConfigMap); ok {
			for _, line := range strings.Split(strings.TrimSpace(cm.Data[mpiHostfileKey]), "\n") {
				host := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == ':' })[0]
				v.peers[strings.TrimSuffix(host, suffix)] = true
			}
		}
	}
	return v
}

// TestIncarnationsAreFenced: under a gang restart scope the pods of two
// incarnations of every framework's job have no hostname, no peer address
// and no rendezvous ID in common, and each incarnation names only its own
// pods, so a rank of incarnation 0 still running on a partitioned node can
// neither reach nor join incarnation 1. Under a pod scope a retried pod
// takes its predecessor's name: nothing changes with the restart count.
func TestIncarnationsAreFenced(t *testing.T) {
	registry := NewBuiltinRegistry(fixedRandom())
	for name, base := range rendezvousJobs() {
		for _, scope := range []v1alpha1.RestartScope{v1alpha1.RestartScopeGang, v1alpha1.RestartScopePod} {
			t.Run(name+"/"+string(scope), func(t *testing.T) {
				a, err := registry.For(base.Spec.Framework)
				if err != nil {
					t.Fatal(err)
				}
				at := func(restarts int32) *v1alpha1.TrainingJob {
					job := base.DeepCopy()
					job.UID = "0d9c6a52-uid"
					job.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: scope}
					job.Status.RestartCount = restarts
					return job
				}
				old, next := viewOf(t, a, at(0)), viewOf(t, a, at(1))
				for _, v := range []incarnationView{old, next} {
					for peer := range v.peers {
						if !v.hostnames[peer] {
							t.Errorf("an incarnation names %q, none of its own pods (%v)", peer, slices.Sorted(maps.Keys(v.hostnames)))
						}
					}
				}
				if len(old.peers) == 0 {
					t.Fatal("no peer address to check")
				}
				if scope == v1alpha1.RestartScopePod {
					if diff := cmp.Diff(old, next, cmp.AllowUnexported(incarnationView{})); diff != "" {
						t.Errorf("a pod-scope restart changed the pods' identity (-before,+after):\n%s", diff)
					}
					return
				}
				for _, shared := range []map[string]bool{intersect(old.hostnames, next.hostnames), intersect(old.ids, next.ids)} {
					if len(shared) > 0 {
						t.Errorf("incarnations 0 and 1 share %v", slices.Sorted(maps.Keys(shared)))
					}
				}
				if base.Spec.Framework == v1alpha1.FrameworkPyTorch && base.Spec.ElasticPolicy != nil && len(next.ids) == 0 {
					t.Error("an elastic PyTorch job has no PET_RDZV_ID")
				}
			})
		}
	}
}

func intersect(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if b[k] {
			out[k] = true
		}
	}
	return out
}

func TestRendezvousID(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaWorker, 2, tpl("pytorch")).ElasticPolicy(v1alpha1.ElasticPolicy{}).DefaultedObj()
	job.UID = "6f1c"
	cases := []struct {
		name string
		rdzv *string
		inc  int32
		want string
	}{
		{name: "the job's UID", want: "6f1c"},
		{name: "the job's UID after a restart", inc: 2, want: "6f1c-r2"},
		{name: "rdzvId is the prefix", rdzv: ptrTo("run-7"), inc: 1, want: "run-7-r1"},
		{name: "rdzvId as given in incarnation 0, as in Kubeflow", rdzv: ptrTo("run-7"), want: "run-7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := job.DeepCopy()
			j.Spec.ElasticPolicy.RDZVID = tc.rdzv
			if got := RendezvousID(j, tc.inc); got != tc.want {
				t.Errorf("RendezvousID = %q, want %q", got, tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
