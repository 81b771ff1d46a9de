package v1alpha1

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdPath is the generated CRD (hack/generate.sh).
const crdPath = "../../../../deploy/crds/lockstep.dev_trainingjobs.yaml"

// crdHarness validates objects the way the API server does on create and
// update: prune, default, then the OpenAPI schema and the CEL rules.
type crdHarness struct {
	crd        *apiextensionsv1.CustomResourceDefinition
	internal   *apiextensions.CustomResourceDefinition
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

var (
	harnessOnce sync.Once
	harness     *crdHarness
	harnessErr  error
)

func loadCRD(t *testing.T) *crdHarness {
	t.Helper()
	harnessOnce.Do(func() { harness, harnessErr = newCRDHarness() })
	if harnessErr != nil {
		t.Fatal(harnessErr)
	}
	return harness
}

func newCRDHarness() (*crdHarness, error) {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		return nil, err
	}
	h := &crdHarness{crd: &apiextensionsv1.CustomResourceDefinition{}, internal: &apiextensions.CustomResourceDefinition{}}
	if err := yaml.UnmarshalStrict(data, h.crd); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(h.crd, h.internal, nil); err != nil {
		return nil, err
	}
	// The internal version holds a schema shared by all versions in
	// spec.validation rather than per version.
	props := h.internal.Spec.Validation.OpenAPIV3Schema
	if h.structural, err = structuralschema.NewStructural(props); err != nil {
		return nil, err
	}
	if h.schema, _, err = apiservervalidation.NewSchemaValidator(props); err != nil {
		return nil, err
	}
	h.cel = cel.NewValidator(h.structural, true, celconfig.PerCallLimit)
	return h, nil
}

// admit prunes and defaults obj in place, as the API server does before it
// validates and stores an object.
func (h *crdHarness) admit(obj map[string]any) {
	pruning.Prune(obj, h.structural, true)
	structuraldefaulting.Default(obj, h.structural)
}

// validate returns the API server's errors for creating obj (old nil) or
// updating old (as stored) to obj. It admits a copy of obj.
func (h *crdHarness) validate(obj, old map[string]any) field.ErrorList {
	obj = runtime.DeepCopyJSON(obj)
	h.admit(obj)
	var errs field.ErrorList
	if old == nil {
		errs = apiservervalidation.ValidateCustomResource(nil, obj, h.schema)
	} else {
		errs = apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, h.schema)
	}
	var oldObj any
	if old != nil {
		oldObj = old
	}
	celErrs, _ := h.cel.Validate(context.Background(), nil, h.structural, obj, oldObj, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDIsAcceptedByAPIServer runs the API server's own CRD validation,
// which compiles every CEL rule and rejects rules over the cost limits.
func TestCRDIsAcceptedByAPIServer(t *testing.T) {
	h := loadCRD(t)
	crd := h.internal.DeepCopy()
	crd.Status.StoredVersions = []string{GroupVersion.Version} // set by the API server
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		t.Fatalf("the API server would reject the CRD:\n%v", errs.ToAggregate())
	}
	info, err := os.Stat(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	// etcd's request limit is 1.5 MiB; stay well clear of it.
	const limit = 900 << 10
	if info.Size() > limit {
		t.Errorf("CRD is %d bytes, over the %d budget", info.Size(), limit)
	}
}

func TestCRDContainsEveryRule(t *testing.T) {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	// Messages name the rules; a missing one means a marker was lost.
	for _, msg := range []string{
		"roles must be valid for the framework",
		"a PyTorch job needs a Master replica unless elasticPolicy is set",
		"an XGBoost job needs a Master replica",
		"an MPI job needs a Launcher replica",
		"Master, Chief and Launcher run exactly one replica",
		"Chief and Master are the same role in TensorFlow",
		"must not exceed the total number of replicas",
		"elasticPolicy applies to PyTorch jobs only",
		"an elastic job needs Worker replicas between elasticPolicy.minReplicas",
		"nprocPerNode applies to PyTorch jobs only",
		"mpi applies to MPI jobs only",
		"roles and pod templates are immutable unless the job is suspended",
		"framework is immutable",
		"minReplicas must not exceed maxReplicas",
		"the name must be a DNS label of at most 47 characters",
	} {
		if !strings.Contains(strings.Join(strings.Fields(string(data)), " "), msg) {
			t.Errorf("CRD lacks the rule %q", msg)
		}
	}
}

func TestCRDPrinterColumns(t *testing.T) {
	h := loadCRD(t)
	got := map[string]string{}
	for _, c := range h.crd.Spec.Versions[0].AdditionalPrinterColumns {
		got[c.Name] = c.JSONPath
	}
	want := map[string]string{
		"State":      ".status.state",
		"Framework":  ".spec.framework",
		"Replicas":   ".status.totalReplicas",
		"Efficiency": ".status.placement.efficiency",
		"Age":        ".metadata.creationTimestamp",
	}
	for name, path := range want {
		if got[name] != path {
			t.Errorf("printer column %s = %q, want %q", name, got[name], path)
		}
	}
	if names := h.crd.Spec.Names.ShortNames; len(names) != 1 || names[0] != "tj" {
		t.Errorf("short names %v, want [tj]", names)
	}
}

// TestTemplateMetadataSurvivesPruning: labels and annotations on pod
// templates must reach the pods (queue labels, sidecar annotations). They
// survive pruning only if controller-gen describes the embedded ObjectMeta
// (crd:generateEmbeddedObjectMeta=true in hack/generate.sh).
func TestTemplateMetadataSurvivesPruning(t *testing.T) {
	h := loadCRD(t)
	tmpl := h.structural.Properties["spec"].Properties["replicaSpecs"].AdditionalProperties.Structural.Properties["template"]
	if _, described := tmpl.Properties["metadata"].Properties["labels"]; !described {
		t.Skip("template metadata is schemaless: hack/generate.sh needs crd:generateEmbeddedObjectMeta=true")
	}
	obj := toUnstructured(t, validPyTorch())
	spec := obj["spec"].(map[string]any)["replicaSpecs"].(map[string]any)["Master"].(map[string]any)["template"].(map[string]any)
	spec["metadata"] = map[string]any{"labels": map[string]any{"team": "vision"}}
	pruning.Prune(obj, h.structural, true)
	meta := spec["metadata"].(map[string]any)
	if _, ok := meta["labels"]; !ok {
		t.Errorf("template labels were pruned: %v", meta)
	}
}

func toUnstructured(t *testing.T, job *TrainingJob) map[string]any {
	t.Helper()
	job = job.DeepCopy()
	job.APIVersion, job.Kind = GroupVersion.String(), "TrainingJob"
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's decoder: whole numbers become int64, as CEL needs.
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}
