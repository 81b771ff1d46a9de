package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/fieldpath"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// checkpointExample is deploy/examples/checkpointing: a PyTorch trainer that
// reports its checkpoints as docs/controller.md's protocol says.
const checkpointExample = "examples/checkpointing"

// TestCheckpointExampleJob: the example's TrainingJob decodes strictly and
// validates.
func TestCheckpointExampleJob(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(checkpointExample, "trainingjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job v1alpha1.TrainingJob
	if err := yaml.UnmarshalStrict(data, &job); err != nil {
		t.Fatal(err)
	}
	job.Default()
	if errs := job.Validate(); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
}

// TestCheckpointExampleTrainer runs the trainer's own tests (its reporting
// and resume logic, without torch) and checks that the report it writes is
// one lockstep.ParseCheckpoint reads: two implementations of one protocol.
func TestCheckpointExampleTrainer(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, which the README names for make test (.ci/run installs it): %v", err)
	}
	// No __pycache__ left in the tree.
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd := exec.Command(python, "-m", "unittest", "-q", "test_train")
	cmd.Dir, cmd.Env = checkpointExample, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 -m unittest test_train: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "inc-0", "step-1200.pt")
	cmd = exec.Command(python, "train.py", "--print-report", "1200", path)
	cmd.Dir, cmd.Env = checkpointExample, env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("train.py --print-report: %v", err)
	}
	c, err := lockstep.ParseCheckpoint(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the trainer's report %s: %v", out, err)
	}
	if c.Step != 1200 || c.Location != "file://"+path || c.Time.IsZero() {
		t.Errorf("the trainer's report reads as %+v, want step 1200 at file://%s", c, path)
	}
}

// TestCheckpointExampleReadsTheNotice: the trainer reads the preemption
// notice from its annotations as the kubelet writes them into a
// downward-API volume (fieldpath.FormatMap, the kubelet's own code), beside
// an annotation whose value needs quoting.
func TestCheckpointExampleReadsTheNotice(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, which the README names for make test (.ci/run installs it): %v", err)
	}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	n := lockstep.Notice{By: "team/urgent", Time: at, Deadline: at.Add(2 * time.Minute)}
	file := filepath.Join(t.TempDir(), "annotations")
	annotations := fieldpath.FormatMap(map[string]string{
		lockstep.AnnotationPreemptionNotice: n.Format(),
		lockstep.AnnotationCheckpoint:       lockstep.Checkpoint{Step: 5, Time: at, Location: "s3://b/\"ö\""}.Format(),
	})
	if err := os.WriteFile(file, []byte(annotations), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "train.py", "--print-notice", file)
	cmd.Dir, cmd.Env = checkpointExample, append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("train.py --print-notice: %v", err)
	}
	got, err := lockstep.ParseNotice(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the notice the trainer read, %s: %v", out, err)
	}
	if diff := cmp.Diff(n, got); diff != "" {
		t.Errorf("the notice the trainer read (-want,+got):\n%s", diff)
	}
}
