package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

const placementExample = `  # Where the ranks of job llama run
  kubectl lockstep placement llama -n ml

  # The same for scripts
  kubectl lockstep placement llama -n ml -o json`

type placementOptions struct {
	levels levelFlags
	output string
}

func newPlacementCommand(connect connector) *cobra.Command {
	o := placementOptions{}
	kubeFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "placement JOB [-n NAMESPACE]",
		Short: "Show where each rank of a TrainingJob runs",
		Long: `Show where a TrainingJob's pods run: for each rank, its pod, node, GPUs
and topology domain at each level, after the job's placement summary.

Ranks follow the framework's role order, then the replica index (for
PyTorch, the RANK each pod gets). GPUs are the indices the node's
NodeTopology says the pod holds (what the node gave it: for a pod whose GPUs
come through DRA claims, its claims' devices) or, where the node's agent
does not say, those the scheduler wrote in the pod's lockstep.dev/gpus
annotation. A job whose pods hold DRA devices gets a DEVICES column: the
devices of each pod's claims by driver, as the job's status.placement
records them (a ComputeDomain's IMEX channel among them).

The summary is the job's status.placement, recorded by the controller: the
narrowest domain holding every pod, how many levels the job spans, the
modelled all-reduce bus bandwidth and the efficiency against the best
placement on an empty cluster, and why; then the same rating computed here
from the pods' nodes and GPUs and the topology configuration, with the
function the controller and scheduler use, to verify them; then the
topology constraint and placement annotations of the job's PodGroup.`,
		Example: placementExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(o.output); err != nil {
				return err
			}
			cfg, err := o.levels.resolve()
			if err != nil {
				return err
			}
			c, err := connect(kubeFlags)
			if err != nil {
				return err
			}
			report, err := fetchPlacement(cmd.Context(), c, args[0], cfg)
			if err != nil {
				return err
			}
			return printPlacement(cmd.OutOrStdout(), o.output, report)
		},
	}
	kubeFlags.AddFlags(cmd.Flags())
	o.levels.add(cmd)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func printPlacement(out io.Writer, output string, r placementReport) error {
	if output != "" {
		return printStructured(out, output, r)
	}
	return printPlacementReport(out, r)
}

// fetchPlacement reads the job, its pods and PodGroup, the nodes and their
// NodeTopologies.
func fetchPlacement(ctx context.Context, c *cluster, name string, cfg lockstep.TopologyConfig) (placementReport, error) {
	u, err := c.dynamic.Resource(trainingJobsResource()).Namespace(c.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return placementReport{}, fmt.Errorf("TrainingJob %q not found in namespace %q (list them with kubectl get trainingjobs -n %s)", name, c.namespace, c.namespace)
	}
	if err != nil {
		return placementReport{}, fmt.Errorf("getting TrainingJob %s/%s: %w", c.namespace, name, err)
	}
	job := &v1alpha1.TrainingJob{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, job); err != nil {
		return placementReport{}, fmt.Errorf("decoding TrainingJob %s/%s: %w", c.namespace, name, err)
	}

	pods, err := c.core.Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: lockstep.LabelJobName + "=" + name})
	if err != nil {
		return placementReport{}, fmt.Errorf("listing the pods of TrainingJob %s/%s: %w", c.namespace, name, err)
	}
	if len(pods.Items) == 0 {
		return placementReport{}, noPodsError(job)
	}
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return placementReport{}, fmt.Errorf("listing nodes: %w", err)
	}
	tree, err := capacity.Build(cfg.Levels, capacityNodes(nodes.Items, nil, nil))
	if err != nil {
		return placementReport{}, fmt.Errorf("building the domain tree: %w", err)
	}
	topos, err := c.listNodeTopologies(ctx)
	if err != nil {
		return placementReport{}, err
	}
	report := buildPlacementReport(job, pods.Items, tree, topos)
	report.Rating = ratePlacement(cfg, nodes.Items, topos, report.Ranks)

	// The controller names the PodGroup after the job.
	pg, err := c.dynamic.Resource(podGroupsResource()).Namespace(c.namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return placementReport{}, fmt.Errorf("getting PodGroup %s/%s: %w", c.namespace, name, err)
	default:
		report.PodGroup = summarizePodGroup(pg.GetName(), pg.GetAnnotations())
	}
	return report, nil
}

// noPodsError says why a job has no pods, as far as its status tells.
func noPodsError(job *v1alpha1.TrainingJob) error {
	state := string(job.Status.State)
	if state == "" {
		return fmt.Errorf("TrainingJob %s/%s has no pods yet and no state: is the Lockstep controller running?", job.Namespace, job.Name)
	}
	why := ""
	if c := meta.FindStatusCondition(job.Status.Conditions, state); c != nil && c.Message != "" {
		why = ": " + c.Reason + ": " + c.Message
	}
	return fmt.Errorf("TrainingJob %s/%s has no pods; it is %s%s", job.Namespace, job.Name, state, why)
}
