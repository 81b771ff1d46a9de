package convert

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGolden converts every input in testdata/input and the users'
// manifests the demo submits (deploy/examples/kubeflow), and compares the
// output with testdata/golden. Each output decodes strictly into
// TrainingJobs that pass validation.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/input/*.yaml")
	users, usersErr := filepath.Glob("../../deploy/examples/kubeflow/*.yaml")
	if err != nil || usersErr != nil || len(inputs) == 0 || len(users) == 0 {
		t.Fatalf("no inputs: %v %v", err, usersErr)
	}
	inputs = append(inputs, users...)
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			f, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := Convert(f)
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			var out bytes.Buffer
			if err := Write(&out, res.Jobs); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", name)
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), out.String()); diff != "" {
				t.Errorf("output differs from %s (-want,+got):\n%s", golden, diff)
			}
			for i, doc := range strings.Split(out.String(), "\n---\n") {
				var job v1alpha1.TrainingJob
				if err := yaml.UnmarshalStrict([]byte(doc), &job); err != nil {
					t.Fatalf("document %d does not decode as a TrainingJob: %v", i+1, err)
				}
				job.Default()
				if errs := job.Validate(); len(errs) > 0 {
					t.Errorf("document %d is invalid: %v", i+1, errs.ToAggregate())
				}
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	cases := []struct {
		input string
		want  []string
	}{
		{
			input: "../../deploy/examples/kubeflow/restricted-kueue.yaml",
			want: []string{
				"document 1 (PyTorchJob bookstore-ml/train): a failed pod restarts the whole gang (failurePolicy.restart defaults to Gang for PyTorch); Kubeflow restarted the pod alone. Set failurePolicy.restart: Pod to keep that",
				"document 1 (PyTorchJob bookstore-ml/train): label kueue.x-k8s.io/queue-name=bookstore-ml-lq kept: the job is queued in that Kueue LocalQueue and starts once Kueue admits its Workload (Kueue must list TrainingJob.v1alpha1.lockstep.dev in integrations.externalFrameworks); without Kueue it waits",
			},
		},
		{
			input: "list.yaml",
			want: []string{
				"document 1 (PyTorchJob ml/ddp-demo): spec.runPolicy.managedBy \"kubeflow.org/training-operator\" dropped: Lockstep's controller manages the TrainingJob",
				"document 1 (PyTorchJob ml/ddp-demo): status dropped: it describes the Kubeflow object's run",
				"document 1 (PyTorchJob ml/ddp-demo): metadata.uid, metadata.resourceVersion, metadata.generation, metadata.creationTimestamp dropped: the API server sets them",
				"document 1 (PyTorchJob ml/ddp-demo): annotation kubectl.kubernetes.io/last-applied-configuration dropped: it records the Kubeflow object",
				"document 1 (PyTorchJob ml/ddp-demo): a failed pod restarts the whole gang (failurePolicy.restart defaults to Gang for PyTorch); Kubeflow restarted the pod alone. Set failurePolicy.restart: Pod to keep that",
			},
		},
		{input: "tfjob-ps.yaml", want: nil},
		{
			input: "mpijob-v1-horovod.yaml",
			want: []string{
				`document 1 (MPIJob ml/tensorflow-benchmarks): spec.mainContainer "mpi" dropped: it chose the container kubectl exec reached; over SSH the ranks run in the container that runs sshd`,
				"document 1 (MPIJob ml/tensorflow-benchmarks): MPIJob kubeflow.org/v1 ran its ranks through kubectl exec (kubexec.sh); Lockstep's MPI jobs use SSH as MPIJob v2beta1 does, so the Worker image must start sshd and the Launcher's mpirun reaches the workers over SSH (mpi.sshAuthMountPath, default /root/.ssh)",
				`document 1 (MPIJob ml/tensorflow-benchmarks): the Worker template has no command: Kubeflow's v1 operator ran "sleep 365d" there, Lockstep runs the image's entrypoint, which must keep sshd running`,
				"document 1 (MPIJob ml/tensorflow-benchmarks): a failed pod restarts the whole gang (failurePolicy.restart defaults to Gang for MPI); Kubeflow restarted the pod alone. Set failurePolicy.restart: Pod to keep that",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.input, func(t *testing.T) {
			path := tc.input
			if !strings.Contains(path, "/") {
				path = filepath.Join("testdata", "input", path)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := Convert(f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Warnings); diff != "" {
				t.Errorf("warnings (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRefusals: what cannot be carried over is refused with the document
// and the field, and nothing is converted.
func TestRefusals(t *testing.T) {
	const pytorchHead = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: train\n  namespace: ml\n"
	const masterSpec = `  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: registry.lab/train:v1
`
	cases := []struct {
		name  string
		input string
		want  []string // each a line of the error
	}{
		{
			name:  "unknown field, a typo",
			input: pytorchHead + "spec:\n  runPolicy:\n    cleanPodPolicyy: All\n" + masterSpec,
			want:  []string{`document 1 (PyTorchJob ml/train): spec.runPolicy.cleanPodPolicyy: unknown field: not a field of PyTorchJob kubeflow.org/v1 (a typo, or a newer version the converter does not know); nothing was converted`},
		},
		{
			name:  "unknown field inside a pod template",
			input: pytorchHead + "spec:\n" + strings.Replace(masterSpec, "image:", "imagee:", 1),
			want:  []string{`document 1 (PyTorchJob ml/train): spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagee: unknown field: not a field of PyTorchJob kubeflow.org/v1 (a typo, or a newer version the converter does not know); nothing was converted`},
		},
		{
			name:  "unsupported kind",
			input: "apiVersion: kubeflow.org/v1\nkind: MXJob\nmetadata:\n  name: mx\nspec: {}\n",
			want:  []string{`document 1 (MXJob mx): kind: unsupported kind "MXJob" (kubeflow.org/v1); the converter reads PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob (kubeflow.org/v1) and MPIJob (kubeflow.org/v2beta1 and kubeflow.org/v1)`},
		},
		{
			name:  "MPIJob of the wrong version",
			input: "apiVersion: kubeflow.org/v1alpha2\nkind: MPIJob\nmetadata:\n  name: mpi\nspec: {}\n",
			want:  []string{`document 1 (MPIJob mpi): apiVersion: MPIJob kubeflow.org/v1alpha2 is not supported; the converter reads MPIJob kubeflow.org/v2beta1 and kubeflow.org/v1`},
		},
		{
			name:  "TFJob of the wrong version",
			input: "apiVersion: kubeflow.org/v2\nkind: TFJob\nmetadata:\n  name: tf\nspec: {}\n",
			want:  []string{`document 1 (TFJob tf): apiVersion: TFJob kubeflow.org/v2 is not supported; the converter reads TFJob kubeflow.org/v1`},
		},
		{
			name:  "XGBoostJob without replica specs",
			input: "apiVersion: kubeflow.org/v1\nkind: XGBoostJob\nmetadata:\n  name: xgb\nspec:\n  runPolicy:\n    managedBy: kueue.x-k8s.io/multikueue\n",
			want: []string{
				`document 1 (XGBoostJob xgb): spec.xgbReplicaSpecs: required: give at least one replica spec`,
				`document 1 (XGBoostJob xgb): spec.runPolicy.managedBy: no TrainingJob equivalent: the job is delegated to "kueue.x-k8s.io/multikueue", and Lockstep cannot hand a TrainingJob to another controller`,
			},
		},
		{
			name:  "MPIJob v1 with a conflicting cleanPodPolicy",
			input: "apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata:\n  name: mpi\nspec:\n  cleanPodPolicy: All\n  runPolicy:\n    cleanPodPolicy: None\n  mpiReplicaSpecs:\n    Launcher:\n      template:\n        spec:\n          containers: [{name: m, image: i}]\n    Worker:\n      replicas: 1\n      template:\n        spec:\n          containers: [{name: m, image: i}]\n",
			want:  []string{`document 1 (MPIJob mpi): spec.cleanPodPolicy: All conflicts with spec.runPolicy.cleanPodPolicy None; keep one`},
		},
		{
			name:  "HPA metrics are read strictly",
			input: pytorchHead + "spec:\n  elasticPolicy:\n    minReplicas: 1\n    maxReplicas: 2\n    metrics:\n      - type: Resource\n        resourze: {}\n" + strings.Replace(masterSpec, "Master", "Worker", 1),
			want:  []string{`document 1 (PyTorchJob ml/train): spec.elasticPolicy.metrics[0].resourze: unknown field: not a field of PyTorchJob kubeflow.org/v1 (a typo, or a newer version the converter does not know); nothing was converted`},
		},
		{
			name:  "minResources has no equivalent",
			input: pytorchHead + "spec:\n  runPolicy:\n    schedulingPolicy:\n      minResources:\n        cpu: 8\n" + masterSpec,
			want:  []string{`document 1 (PyTorchJob ml/train): spec.runPolicy.schedulingPolicy.minResources: no TrainingJob equivalent: Lockstep computes the gang's resources from the pod templates; remove it`},
		},
		{
			name:  "delegated to MultiKueue",
			input: pytorchHead + "spec:\n  runPolicy:\n    managedBy: kueue.x-k8s.io/multikueue\n" + masterSpec,
			want:  []string{`document 1 (PyTorchJob ml/train): spec.runPolicy.managedBy: no TrainingJob equivalent: the job is delegated to "kueue.x-k8s.io/multikueue", and Lockstep cannot hand a TrainingJob to another controller`},
		},
		{
			name:  "dynamic TensorFlow workers",
			input: "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: tf\nspec:\n  enableDynamicWorker: true\n  tfReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          containers: [{name: tensorflow, image: tf}]\n",
			want:  []string{`document 1 (TFJob tf): spec.enableDynamicWorker: no TrainingJob equivalent: Lockstep writes the full TF_CONFIG cluster, not the sparse one; remove it`},
		},
		{
			name:  "elastic Paddle",
			input: "apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata:\n  name: pd\nspec:\n  elasticPolicy:\n    minReplicas: 1\n  paddleReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          containers: [{name: paddle, image: pd}]\n",
			want:  []string{`document 1 (PaddleJob pd): spec.elasticPolicy: no TrainingJob equivalent: Lockstep runs elastic jobs for PyTorch only; remove it to run a fixed-size PaddleJob`},
		},
		{
			name:  "a role the framework does not have",
			input: pytorchHead + "spec:\n" + masterSpec + "    PS:\n      template:\n        spec:\n          containers: [{name: pytorch, image: t}]\n",
			want:  []string{`document 1 (PyTorchJob ml/train): spec.pytorchReplicaSpecs.PS: PyTorchJob has no role "PS"; its roles are [Master Worker]`},
		},
		{
			name:  "invalid as a TrainingJob",
			input: pytorchHead + "spec:\n" + strings.Replace(masterSpec, "Master", "Worker", 1),
			want:  []string{`document 1 (PyTorchJob ml/train): the TrainingJob would be invalid: spec.replicaSpecs[Master]: Required value: a PyTorch job needs a Master replica unless elasticPolicy is set`},
		},
		{
			name:  "finalizers",
			input: strings.Replace(pytorchHead, "  namespace: ml\n", "  namespace: ml\n  finalizers: [example.com/keep]\n", 1) + "spec:\n" + masterSpec,
			want:  []string{`document 1 (PyTorchJob ml/train): metadata.finalizers: refused: no Lockstep controller would remove them; remove them`},
		},
		{
			name: "every refusal of every document, numbered",
			input: pytorchHead + "spec:\n" + masterSpec + "---\n# a comment-only document is not counted\n---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n---\n" +
				pytorchHead + "spec:\n  bogus: 1\n" + masterSpec,
			want: []string{
				`document 2 (ConfigMap settings): kind: unsupported kind "ConfigMap" (v1); the converter reads PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob (kubeflow.org/v1) and MPIJob (kubeflow.org/v2beta1 and kubeflow.org/v1)`,
				`document 3 (PyTorchJob ml/train): spec.bogus: unknown field: not a field of PyTorchJob kubeflow.org/v1 (a typo, or a newer version the converter does not know); nothing was converted`,
			},
		},
		{
			name:  "inside a List",
			input: "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: kubeflow.org/v1\n    kind: JAXJob\n    metadata: {name: j}\n    spec:\n      jaxReplicaSpecs:\n        Worker:\n          replicaz: 2\n",
			want:  []string{`document 1 (JAXJob j): items[0].spec.jaxReplicaSpecs.Worker.replicaz: unknown field: not a field of JAXJob kubeflow.org/v1 (a typo, or a newer version the converter does not know); nothing was converted`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Convert(strings.NewReader(tc.input))
			if err == nil {
				t.Fatalf("converted %d jobs, want a refusal", len(res.Jobs))
			}
			if diff := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error lines (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestElasticNProcPerNode(t *testing.T) {
	const in = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: e}
spec:
  elasticPolicy: {minReplicas: 1, maxReplicas: 2, nProcPerNode: 4}
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: t}]}}
`
	res, err := Convert(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Jobs[0].Job.Spec.NprocPerNode; got == nil || *got != "4" {
		t.Errorf("nprocPerNode %v, want the deprecated elasticPolicy.nProcPerNode 4 as \"4\"", got)
	}
	conflict := strings.Replace(in, "spec:\n", "spec:\n  nprocPerNode: \"8\"\n", 1)
	if _, err := Convert(strings.NewReader(conflict)); err == nil || !strings.Contains(err.Error(), `spec.elasticPolicy.nProcPerNode: 4 conflicts with spec.nprocPerNode "8"`) {
		t.Errorf("conflicting nProcPerNode: error %v", err)
	}
}
