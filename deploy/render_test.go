// Package deploy holds no code: its test renders the kustomize overlays
// with the kubectl that make tools builds and checks what they would
// install.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// overlays are the kustomizations users apply.
var overlays = []string{"default", "kind"}

// secretsException is the one role allowed to touch Secrets, and whom it
// may be bound to: the controller creates MPI jobs' SSH key Secrets.
const (
	secretsException        = "lockstep-controller-mpi-ssh-keys"
	secretsExceptionSubject = "lockstep-system/lockstep-controller"
)

// restrictedWorkloads must satisfy Pod Security "restricted" in every
// overlay that has them.
var restrictedWorkloads = []string{"lockstep-scheduler", "lockstep-controller"}

// rendered is one overlay's objects, decoded into typed objects where the
// scheme knows the kind.
type rendered struct {
	objects []runtime.Object
}

func TestOverlays(t *testing.T) {
	kubectl, err := filepath.Abs(filepath.Join("..", "bin", "kubectl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%v: run make tools (the overlays are rendered with the kubectl built from go.mod's Kubernetes)", err)
	}
	// kubectl reads the manifests, not this process: reading them here too
	// makes go test's cache notice when they change.
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			out, err := exec.Command(kubectl, "kustomize", overlay).Output()
			if err != nil {
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					t.Fatalf("kubectl kustomize %s: %v\n%s", overlay, err, exit.Stderr)
				}
				t.Fatal(err)
			}
			r, err := decode(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, check := range []struct {
				name string
				fn   func(*rendered) []error
			}{
				{"service accounts exist", checkServiceAccounts},
				{"no secrets or wildcards", checkRoles},
				{"restricted pods", checkRestricted},
			} {
				t.Run(check.name, func(t *testing.T) {
					for _, err := range check.fn(r) {
						t.Error(err)
					}
				})
			}
		})
	}
}

// decode parses every document; kinds the scheme knows must decode into
// their types, strictly.
func decode(data []byte) (*rendered, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	r := &rendered{}
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document %d lacks apiVersion, kind or name", i)
		}
		if !scheme.Recognizes(u.GroupVersionKind()) {
			r.objects = append(r.objects, u)
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		r.objects = append(r.objects, obj)
	}
}

// podTemplates returns each workload's pod template by "Kind ns/name".
func (r *rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range r.objects {
		switch w := o.(type) {
		case *appsv1.Deployment:
			out["Deployment "+w.Namespace+"/"+w.Name] = &w.Spec.Template
		case *appsv1.DaemonSet:
			out["DaemonSet "+w.Namespace+"/"+w.Name] = &w.Spec.Template
		case *appsv1.StatefulSet:
			out["StatefulSet "+w.Namespace+"/"+w.Name] = &w.Spec.Template
		}
	}
	return out
}

// checkServiceAccounts: every workload names a ServiceAccount that the
// overlay creates, and so does every binding subject.
func checkServiceAccounts(r *rendered) []error {
	sas := map[string]bool{}
	for _, o := range r.objects {
		if sa, ok := o.(*corev1.ServiceAccount); ok {
			sas[sa.Namespace+"/"+sa.Name] = true
		}
	}
	var errs []error
	for name, tmpl := range r.podTemplates() {
		ns := strings.SplitN(strings.Fields(name)[1], "/", 2)[0]
		sa := tmpl.Spec.ServiceAccountName
		switch {
		case sa == "":
			errs = append(errs, fmt.Errorf("%s runs as the namespace's default ServiceAccount; name its own", name))
		case !sas[ns+"/"+sa]:
			errs = append(errs, fmt.Errorf("%s uses ServiceAccount %s/%s, which the overlay does not create", name, ns, sa))
		}
	}
	for _, o := range r.objects {
		var subjects []rbacv1.Subject
		var what string
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			subjects, what = b.Subjects, "ClusterRoleBinding "+b.Name
		case *rbacv1.RoleBinding:
			subjects, what = b.Subjects, "RoleBinding "+b.Namespace+"/"+b.Name
		}
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && !sas[s.Namespace+"/"+s.Name] {
				errs = append(errs, fmt.Errorf("%s binds ServiceAccount %s/%s, which the overlay does not create", what, s.Namespace, s.Name))
			}
		}
	}
	return errs
}

// checkRoles: no rule uses "*", and no rule reaches Secrets, except the
// one exception, which may only create and read and is bound only to the
// controller.
func checkRoles(r *rendered) []error {
	var errs []error
	for _, o := range r.objects {
		var rules []rbacv1.PolicyRule
		var name, what string
		switch role := o.(type) {
		case *rbacv1.ClusterRole:
			rules, name, what = role.Rules, role.Name, "ClusterRole "+role.Name
			if role.AggregationRule != nil {
				errs = append(errs, fmt.Errorf("%s aggregates other roles", what))
			}
		case *rbacv1.Role:
			rules, name, what = role.Rules, role.Name, "Role "+role.Namespace+"/"+role.Name
		case *rbacv1.ClusterRoleBinding:
			if role.RoleRef.Name == secretsException {
				for _, s := range role.Subjects {
					if s.Kind != rbacv1.ServiceAccountKind || s.Namespace+"/"+s.Name != secretsExceptionSubject {
						errs = append(errs, fmt.Errorf("ClusterRoleBinding %s grants %s to %s %s/%s", role.Name, secretsException, s.Kind, s.Namespace, s.Name))
					}
				}
			}
			continue
		default:
			continue
		}
		for i, rule := range rules {
			for _, field := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups, rule.NonResourceURLs} {
				if slices.Contains(field, "*") {
					errs = append(errs, fmt.Errorf("%s rule %d uses a wildcard: %+v", what, i, rule))
				}
			}
			secrets := slices.Contains(rule.APIGroups, "") && slices.ContainsFunc(rule.Resources, func(res string) bool {
				return res == "secrets" || strings.HasPrefix(res, "secrets/")
			})
			switch {
			case !secrets:
			case name != secretsException:
				errs = append(errs, fmt.Errorf("%s rule %d grants Secrets: %+v", what, i, rule))
			default:
				for _, v := range rule.Verbs {
					if !slices.Contains([]string{"get", "list", "watch", "create"}, v) {
						errs = append(errs, fmt.Errorf("%s may %s Secrets; it only creates MPI keys", what, v))
					}
				}
			}
		}
	}
	return errs
}

// checkRestricted: the scheduler's and controller's pods, and every pod of
// a namespace that enforces "restricted", pass Pod Security's own
// "restricted" checks (runAsNonRoot, allowPrivilegeEscalation: false,
// capabilities drop ALL, seccomp RuntimeDefault, no host access, ...).
func checkRestricted(r *rendered) []error {
	restrictedNS := map[string]bool{}
	for _, o := range r.objects {
		if ns, ok := o.(*corev1.Namespace); ok && ns.Labels[psaapi.EnforceLevelLabel] == string(psaapi.LevelRestricted) {
			restrictedNS[ns.Name] = true
		}
	}
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks())
	if err != nil {
		return []error{err}
	}
	level := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	var errs []error
	seen := map[string]bool{}
	for name, tmpl := range r.podTemplates() {
		nsName := strings.Fields(name)[1]
		ns, workload, _ := strings.Cut(nsName, "/")
		must := slices.Contains(restrictedWorkloads, workload)
		seen[workload] = seen[workload] || must
		if !must && !restrictedNS[ns] {
			continue
		}
		if must && !restrictedNS[ns] {
			errs = append(errs, fmt.Errorf("%s: namespace %s does not enforce restricted", name, ns))
		}
		for _, res := range evaluator.EvaluatePod(level, &tmpl.ObjectMeta, &tmpl.Spec) {
			if !res.Allowed {
				errs = append(errs, fmt.Errorf("%s violates restricted: %s: %s", name, res.ForbiddenReason, res.ForbiddenDetail))
			}
		}
	}
	for _, w := range restrictedWorkloads {
		if !seen[w] {
			errs = append(errs, fmt.Errorf("no workload %s rendered", w))
		}
	}
	return errs
}
