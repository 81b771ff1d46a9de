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
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/controller/framework"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// overlays are the kustomizations users apply.
var overlays = []string{"default", "kind"}

// secretsException is the one role allowed to touch Secrets, and whom it
// may be bound to: the controller creates MPI jobs' SSH key Secrets, and
// may do nothing else with Secrets (no get, list or watch).
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
				{"admission policies bound", checkPolicies},
				{"agent label allow-list is the contract's", checkAgentLabels},
				{"agents are system-critical", checkAgentPriority},
				{"template policy names the template rules", checkTemplatePolicy},
				{"checkpoint policies name the contract", checkCheckpointPolicies},
				{"metrics authenticated and fenced", checkMetrics},
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

// checkAgentPriority: every topology agent runs at a system-critical
// priority, so preemption never evicts what the scheduler plans on: the
// per-node DaemonSet at system-node-critical, like the device plugin.
func checkAgentPriority(r *rendered) []error {
	var errs []error
	found := false
	for name, tmpl := range r.podTemplates() {
		if !strings.Contains(name, "topology-agent") {
			continue
		}
		found = true
		want := "system-cluster-critical"
		if strings.HasPrefix(name, "DaemonSet ") {
			want = "system-node-critical"
		}
		if got := tmpl.Spec.PriorityClassName; got != want {
			errs = append(errs, fmt.Errorf("%s has priorityClassName %q, want %s", name, got, want))
		}
	}
	if !found {
		errs = append(errs, errors.New("no topology agent workload rendered"))
	}
	return errs
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
					if v != "create" {
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

// policies are the ValidatingAdmissionPolicies every overlay must install
// and bind with Deny, and the ServiceAccount each is held to ("" when it
// applies to every caller, podBound for every pod-bound token).
var policies = map[string]string{
	"lockstep-topology-agent-own-node":  "lockstep-agent:lockstep-topology-agent",
	"lockstep-controller-owned-objects": "lockstep-system:lockstep-controller",
	"lockstep-trainingjob-templates":    "",
	"lockstep-checkpoint-reports":       podBound,
}

// podBound stands for the callers the checkpoint policy holds: any
// ServiceAccount token bound to a pod, which the kubelet mounts.
const podBound = "pod-bound"

func (r *rendered) policy(name string) *admissionv1.ValidatingAdmissionPolicy {
	for _, o := range r.objects {
		if p, ok := o.(*admissionv1.ValidatingAdmissionPolicy); ok && p.Name == name {
			return p
		}
	}
	return nil
}

// checkPolicies: each policy is present, fails closed, is bound with Deny,
// and matches the ServiceAccount that overlay's workload runs as.
func checkPolicies(r *rendered) []error {
	var errs []error
	bound := map[string]bool{}
	for _, o := range r.objects {
		if b, ok := o.(*admissionv1.ValidatingAdmissionPolicyBinding); ok && slices.Contains(b.Spec.ValidationActions, admissionv1.Deny) {
			bound[b.Spec.PolicyName] = true
		}
	}
	for name, sa := range policies {
		p := r.policy(name)
		if p == nil {
			errs = append(errs, fmt.Errorf("no ValidatingAdmissionPolicy %s", name))
			continue
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
			errs = append(errs, fmt.Errorf("policy %s does not fail closed", name))
		}
		if !bound[name] {
			errs = append(errs, fmt.Errorf("policy %s has no binding with validationActions Deny", name))
		}
		if sa == "" {
			if len(p.Spec.MatchConditions) > 0 {
				errs = append(errs, fmt.Errorf("policy %s applies to every caller, but has match conditions", name))
			}
			continue
		}
		want := "'system:serviceaccount:" + sa + "'"
		if sa == podBound {
			want = "'authentication.kubernetes.io/pod-name' in request.userInfo.extra"
		}
		if !slices.ContainsFunc(p.Spec.MatchConditions, func(c admissionv1.MatchCondition) bool {
			return strings.Contains(c.Expression, want)
		}) {
			errs = append(errs, fmt.Errorf("policy %s does not match %s", name, want))
		}
	}
	return errs
}

// quoted returns the single-quoted strings of a CEL expression.
func quoted(expr string) []string {
	var out []string
	for i, part := range strings.Split(expr, "'") {
		if i%2 == 1 {
			out = append(out, part)
		}
	}
	return out
}

// checkAgentLabels: the node label keys the agent's policy allows are
// exactly lockstep.AgentNodeLabels().
func checkAgentLabels(r *rendered) []error {
	p := r.policy("lockstep-topology-agent-own-node")
	if p == nil {
		return nil // checkPolicies reports it
	}
	for _, v := range p.Spec.Variables {
		if v.Name != "agentLabels" {
			continue
		}
		got, want := slices.Sorted(slices.Values(quoted(v.Expression))), slices.Sorted(slices.Values(lockstep.AgentNodeLabels()))
		if !slices.Equal(got, want) {
			return []error{fmt.Errorf("agent policy allows node labels %q, the contract (lockstep.AgentNodeLabels) %q", got, want)}
		}
		if !slices.ContainsFunc(p.Spec.Validations, func(v admissionv1.Validation) bool {
			return strings.Contains(v.Expression, "variables.agentLabels")
		}) {
			return []error{errors.New("agent policy declares agentLabels but no validation uses it")}
		}
		return nil
	}
	return []error{errors.New("agent policy has no agentLabels variable")}
}

// checkTemplatePolicy: the template policy checks every field of the Go
// template rules (v1alpha1.RefusedTemplateFields, PrivilegedTemplateFields)
// and reads the contract's namespace label.
func checkTemplatePolicy(r *rendered) []error {
	p := r.policy("lockstep-trainingjob-templates")
	if p == nil {
		return nil
	}
	var text strings.Builder
	for _, v := range p.Spec.Variables {
		text.WriteString(v.Expression + "\n")
	}
	for _, v := range p.Spec.Validations {
		text.WriteString(v.Expression + "\n" + v.MessageExpression + "\n")
	}
	var errs []error
	for _, f := range append(v1alpha1.RefusedTemplateFields(), v1alpha1.PrivilegedTemplateFields()...) {
		// The policy names a label or a variable by its key and a field by
		// its last element.
		leaf := f
		if _, key, ok := strings.Cut(f, "labels["); ok {
			leaf = "'" + strings.TrimSuffix(key, "]") + "'"
		} else if _, key, ok := strings.Cut(f, "env["); ok {
			leaf = "'" + strings.TrimSuffix(key, "]") + "'"
		} else {
			leaf = f[strings.LastIndex(f, ".")+1:]
		}
		if !strings.Contains(text.String(), leaf) {
			errs = append(errs, fmt.Errorf("template policy does not check %s (%s)", f, leaf))
		}
	}
	if !strings.Contains(text.String(), "'"+lockstep.LabelAllowPrivilegedTemplates+"'") {
		errs = append(errs, fmt.Errorf("template policy does not read the namespace label %s", lockstep.LabelAllowPrivilegedTemplates))
	}
	return errs
}

// checkMetrics: the controller's and agent's ServiceAccounts may review
// tokens and access (their /metrics is authenticated), a reader role for
// scrapers exists, and NetworkPolicies fence the metrics ports to
// namespaces labelled lockstep.LabelMetricsScraper.
func checkMetrics(r *rendered) []error {
	var errs []error
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range r.objects {
		if cr, ok := o.(*rbacv1.ClusterRole); ok {
			roles[cr.Name] = cr.Rules
		}
	}
	grants := func(role, group, resource, verb string) bool {
		return slices.ContainsFunc(roles[role], func(rule rbacv1.PolicyRule) bool {
			return slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb)
		})
	}
	for _, role := range []string{"lockstep-controller", "lockstep-topology-agent", "lockstep-scheduler"} {
		if !grants(role, "authentication.k8s.io", "tokenreviews", "create") || !grants(role, "authorization.k8s.io", "subjectaccessreviews", "create") {
			errs = append(errs, fmt.Errorf("ClusterRole %s cannot create tokenreviews and subjectaccessreviews: its /metrics cannot authenticate", role))
		}
	}
	if !slices.ContainsFunc(roles["lockstep-metrics-reader"], func(rule rbacv1.PolicyRule) bool {
		return slices.Equal(rule.NonResourceURLs, []string{"/metrics"}) && slices.Equal(rule.Verbs, []string{"get"})
	}) {
		errs = append(errs, errors.New("no ClusterRole lockstep-metrics-reader granting get on /metrics"))
	}
	fenced := map[string]bool{}
	for _, o := range r.objects {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			metricsPort := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
				return p.Port != nil && p.Port.StrVal == "metrics"
			})
			onlyScrapers := len(rule.From) > 0 && !slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
				return p.NamespaceSelector == nil || p.NamespaceSelector.MatchLabels[lockstep.LabelMetricsScraper] != "true"
			})
			if metricsPort && onlyScrapers {
				fenced[np.Namespace+"/"+np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"]] = true
			}
		}
	}
	for name, tmpl := range r.podTemplates() {
		if !slices.ContainsFunc(tmpl.Spec.Containers, func(c corev1.Container) bool {
			return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
		}) {
			continue
		}
		ns := strings.SplitN(strings.Fields(name)[1], "/", 2)[0]
		if !fenced[ns+"/"+tmpl.Labels["app.kubernetes.io/name"]] {
			errs = append(errs, fmt.Errorf("%s serves a metrics port that no NetworkPolicy limits to namespaces labelled %s=true", name, lockstep.LabelMetricsScraper))
		}
	}
	return errs
}

// checkCheckpointPolicies: the checkpoint policy holds the contract's
// annotation and its size bound, and the controller's policy binds only the
// reporter Role the controller names (framework.CheckpointReporterName).
func checkCheckpointPolicies(r *rendered) []error {
	var errs []error
	text := func(name string) string {
		p := r.policy(name)
		if p == nil {
			return ""
		}
		var b strings.Builder
		for _, c := range p.Spec.MatchConditions {
			b.WriteString(c.Expression + "\n")
		}
		for _, v := range p.Spec.Variables {
			b.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			b.WriteString(v.Expression + "\n" + v.Message + v.MessageExpression + "\n")
		}
		return b.String()
	}
	reports := text("lockstep-checkpoint-reports")
	for _, want := range []string{"'" + lockstep.AnnotationCheckpoint + "'", "'" + lockstep.LabelJobName + "'", strconv.Itoa(lockstep.MaxCheckpointReport)} {
		if !strings.Contains(reports, want) {
			errs = append(errs, fmt.Errorf("checkpoint policy does not name %s", want))
		}
	}
	if suffix := strings.TrimPrefix(framework.CheckpointReporterName("JOB"), "JOB"); !strings.Contains(text("lockstep-controller-owned-objects"), "variables.newJob + '"+suffix+"'") {
		errs = append(errs, fmt.Errorf("controller policy does not bind only the reporter Role <job>%s", suffix))
	}
	return errs
}
