package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newRootCommand builds the plugin's commands; connect makes the clients of
// the commands that read the cluster.
func newRootCommand(in io.Reader, out, errOut io.Writer, connect connector) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-lockstep",
		Short: "Work with Lockstep TrainingJobs",
		Long: `kubectl lockstep works with Lockstep, which places GPU training jobs on a
Kubernetes cluster by its network and NVLink topology.`,
		Annotations: map[string]string{
			// Help and usage show the command as users type it.
			cobra.CommandDisplayNameAnnotation: "kubectl lockstep",
		},
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newConvertCommand(), newTopologyCommand(connect), newPlacementCommand(connect))
	return root
}
