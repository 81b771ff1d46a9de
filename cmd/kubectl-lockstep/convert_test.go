package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand(strings.NewReader(stdin), &out, &errOut, connectKubeconfig)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

const tfJob = `apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: tf, namespace: ml}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: tf:2.15}]}}
`

func TestConvertFromStdin(t *testing.T) {
	stdout, stderr, err := run(t, tfJob, "convert", "-f", "-")
	if err != nil {
		t.Fatalf("convert: %v\n%s", err, stderr)
	}
	want := `apiVersion: lockstep.dev/v1alpha1
kind: TrainingJob
metadata:
  name: tf
  namespace: ml
spec:
  framework: TensorFlow
  replicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - image: tf:2.15
            name: tensorflow
`
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("stdout (-want,+got):\n%s", diff)
	}
	if stderr != "" {
		t.Errorf("unexpected stderr: %s", stderr)
	}
}

func TestConvertFiles(t *testing.T) {
	dir := t.TempDir()
	jax := filepath.Join(dir, "jax.yaml")
	if err := os.WriteFile(jax, []byte(strings.NewReplacer("TFJob", "JAXJob", "tfReplicaSpecs", "jaxReplicaSpecs", "name: tf,", "name: jax,").Replace(tfJob)), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, tfJob, "convert", "-f", jax, "-f", "-")
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	if n := strings.Count(stdout, "kind: TrainingJob"); n != 2 || !strings.Contains(stdout, "\n---\n") {
		t.Errorf("want two documents, got:\n%s", stdout)
	}
	if !strings.Contains(stderr, "Warning: "+jax+": document 1 (JAXJob ml/jax): a failed pod restarts the whole gang") {
		t.Errorf("stderr lacks the gang-restart warning for %s:\n%s", jax, stderr)
	}
}

func TestConvertRefusalWritesNothing(t *testing.T) {
	bad := tfJob + "---\n" + strings.Replace(tfJob, "replicas: 2", "replicas: 2\n      restartPolicy: Sometimes", 1)
	stdout, stderr, err := run(t, bad, "convert", "-f", "-")
	if err == nil {
		t.Fatal("convert accepted an unknown restart policy")
	}
	if stdout != "" {
		t.Errorf("stdout not empty after a refusal:\n%s", stdout)
	}
	want := `<stdin>: document 2 (TFJob ml/tf): spec.tfReplicaSpecs.Worker.restartPolicy: unsupported value "Sometimes": use Always, OnFailure, Never or ExitCode`
	if !strings.Contains(stderr, "Error: "+want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

func TestConvertHelp(t *testing.T) {
	stdout, _, err := run(t, "", "convert", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubectl lockstep convert -f FILENAME", "-f, --filename", "kubectl get pytorchjobs -n ml -o yaml | kubectl lockstep convert -f -"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
	if _, _, err := run(t, "", "convert"); err == nil || !strings.Contains(err.Error(), `required flag(s) "filename" not set`) {
		t.Errorf("convert without -f: %v", err)
	}
}
