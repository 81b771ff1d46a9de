package framework

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestBuiltinRegistry(t *testing.T) {
	r := NewBuiltinRegistry(fixedRandom())
	want := []v1alpha1.Framework{"JAX", "MPI", "Paddle", "PyTorch", "TensorFlow", "XGBoost"}
	if diff := cmp.Diff(want, r.Frameworks()); diff != "" {
		t.Errorf("frameworks (-want,+got):\n%s", diff)
	}
	scopes := map[v1alpha1.Framework]v1alpha1.RestartScope{
		"PyTorch": "Gang", "MPI": "Gang", "JAX": "Gang", "TensorFlow": "Pod", "XGBoost": "Pod", "Paddle": "Pod",
	}
	for _, f := range want {
		a, err := r.For(f)
		if err != nil {
			t.Fatal(err)
		}
		if a.Framework() != f {
			t.Errorf("adapter for %s says it is %s", f, a.Framework())
		}
		// Roles is the API's role set, in start order.
		got, valid := slices.Clone(a.Roles()), slices.Clone(v1alpha1.FrameworkRoles(f))
		slices.Sort(got)
		slices.Sort(valid)
		if diff := cmp.Diff(valid, got); diff != "" {
			t.Errorf("%s roles differ from the API's (-api,+adapter):\n%s", f, diff)
		}
		if got := a.DefaultRestartScope(); got != scopes[f] {
			t.Errorf("%s default restart scope %s, want %s", f, got, scopes[f])
		}
	}
	if err := r.Register(PyTorch{}); err == nil {
		t.Error("registering PyTorch twice succeeded")
	}
	if _, err := NewRegistry().For(v1alpha1.FrameworkPyTorch); err == nil {
		t.Error("an empty registry found an adapter")
	}
}

func TestStartOrder(t *testing.T) {
	if got := NewMPI(nil).Roles(); got[len(got)-1] != v1alpha1.ReplicaLauncher {
		t.Errorf("MPI roles %v: the Launcher must start last", got)
	}
	if got := (PyTorch{}).Roles(); got[0] != v1alpha1.ReplicaMaster {
		t.Errorf("PyTorch roles %v: the Master must start first", got)
	}
}

func TestEffectiveRestartScope(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).DefaultedObj()
	if got := EffectiveRestartScope(PyTorch{}, job); got != v1alpha1.RestartScopeGang {
		t.Errorf("default scope %s, want Gang", got)
	}
	job.Spec.FailurePolicy = &v1alpha1.FailurePolicy{Restart: v1alpha1.RestartScopePod}
	if got := EffectiveRestartScope(PyTorch{}, job); got != v1alpha1.RestartScopePod {
		t.Errorf("scope %s, want the job's Pod", got)
	}
}

func TestPodNaming(t *testing.T) {
	job := makeJob(v1alpha1.FrameworkPyTorch).Role(v1alpha1.ReplicaMaster, 1, tpl("pytorch")).DefaultedObj()
	long := strings.Repeat("a", v1alpha1.MaxNameLength)
	cases := []struct {
		job   string
		role  v1alpha1.ReplicaType
		index int32
		inc   int32
		want  string
	}{
		{"train", v1alpha1.ReplicaEvaluator, 3, 0, "train-evaluator-3"},
		{"train", v1alpha1.ReplicaWorker, 12, 1, "train-worker-r1-12"},
		{"train", v1alpha1.ReplicaMaster, 0, 250, "train-master-r250-0"},
		// 47 + 15 = 62: fits.
		{long, v1alpha1.ReplicaEvaluator, 9999, 0, long + "-evaluator-9999"},
		// Too long for a DNS label: the end stays, the job's name gives way
		// to a hash of the whole name.
		{long, v1alpha1.ReplicaEvaluator, 9999, 2147483647, ""},
	}
	hashed := regexp.MustCompile(`^a{27}-[0-9a-f]{8}-evaluator-r2147483647-9999$`)
	seen := map[string]bool{}
	for _, tc := range cases {
		got := PodName(tc.job, tc.role, tc.index, tc.inc)
		if len(got) > 63 {
			t.Errorf("PodName(%q, %s, %d, %d) = %q: %d characters, longer than a DNS label", tc.job, tc.role, tc.index, tc.inc, got, len(got))
		}
		switch {
		case tc.want == "" && !hashed.MatchString(got):
			t.Errorf("PodName(%q, %s, %d, %d) = %q, want the job's name cut to 27 characters (63 in all), an 8-digit hash, then role, incarnation and index", tc.job, tc.role, tc.index, tc.inc, got)
		case tc.want != "" && got != tc.want:
			t.Errorf("PodName(%q, %s, %d, %d) = %q, want %q", tc.job, tc.role, tc.index, tc.inc, got, tc.want)
		}
		seen[got] = true
	}
	// Every incarnation of a long-named job's pod has its own name.
	for inc := int32(0); inc < 2000; inc++ {
		name := PodName(long, v1alpha1.ReplicaWorker, 7, inc)
		if len(name) > 63 || seen[name] {
			t.Fatalf("incarnation %d: %q (%d characters) is too long or not unique", inc, name, len(name))
		}
		seen[name] = true
	}
	if got := PodAddress(job, v1alpha1.ReplicaMaster, 0, 0); got != "train-master-0.train.ml.svc" {
		t.Errorf("PodAddress = %q", got)
	}
	if got := PodAddress(job, v1alpha1.ReplicaMaster, 0, 3); got != "train-master-r3-0.train.ml.svc" {
		t.Errorf("PodAddress in incarnation 3 = %q", got)
	}
}

func TestPodTemplateErrors(t *testing.T) {
	cases := []struct {
		name  string
		job   *v1alpha1.TrainingJob
		role  v1alpha1.ReplicaType
		index int32
		want  string
	}{
		{"missing role", makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 2, tpl("jax")).DefaultedObj(), v1alpha1.ReplicaMaster, 0, "has no Master replicas"},
		{"index out of range", makeJob(v1alpha1.FrameworkJAX).Role(v1alpha1.ReplicaWorker, 2, tpl("jax")).DefaultedObj(), v1alpha1.ReplicaWorker, 2, "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := JAX{}.PodTemplate(tc.job, tc.role, tc.index)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
