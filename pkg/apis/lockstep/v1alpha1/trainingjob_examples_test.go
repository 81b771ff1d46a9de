package v1alpha1

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// TestConvertedExamples decodes every TrainingJob the converter made from
// users' Kubeflow manifests (pkg/convert/testdata/golden) and checks that
// the API server would accept it and that Validate agrees.
func TestConvertedExamples(t *testing.T) {
	h := loadCRD(t)
	files, err := filepath.Glob("../../../convert/testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no converted examples: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			t.Run(filepath.Base(file)+"/"+strconv.Itoa(i+1), func(t *testing.T) {
				var job TrainingJob
				if err := yaml.UnmarshalStrict([]byte(doc), &job); err != nil {
					t.Fatalf("not a TrainingJob: %v", err)
				}
				if job.Name == "" || job.Spec.Framework == "" || len(job.Spec.ReplicaSpecs) == 0 {
					t.Fatalf("decoded an empty job: %+v", job.ObjectMeta)
				}
				if errs := job.Validate(); len(errs) > 0 {
					t.Errorf("Validate: %v", errs.ToAggregate())
				}
				js, err := yaml.YAMLToJSON([]byte(doc))
				if err != nil {
					t.Fatal(err)
				}
				var obj map[string]any
				if err := utiljson.Unmarshal(js, &obj); err != nil {
					t.Fatal(err)
				}
				if errs := h.validate(obj, nil); len(errs) > 0 {
					t.Errorf("API server: %v", errs.ToAggregate())
				}
			})
		}
	}
}
