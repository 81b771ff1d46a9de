package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/lockstep-dev/lockstep/pkg/convert"
)

const convertExample = `  # Convert a PyTorchJob manifest
  kubectl lockstep convert -f pytorchjob.yaml

  # Convert and create the TrainingJobs
  kubectl lockstep convert -f jobs.yaml | kubectl apply -f -

  # Convert the PyTorchJobs running in a namespace
  kubectl get pytorchjobs -n ml -o yaml | kubectl lockstep convert -f -`

func newConvertCommand() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "convert -f FILENAME",
		Short: "Convert Kubeflow training jobs to TrainingJobs",
		Long: `Convert Kubeflow training jobs to Lockstep TrainingJobs.

Reads PyTorchJob, TFJob, XGBoostJob, PaddleJob and JAXJob (kubeflow.org/v1)
and MPIJob (kubeflow.org/v2beta1) manifests, one or more YAML documents per
file or a List, and writes one TrainingJob per job to standard output. Pod
templates are carried over as written; pods get the same environment
(MASTER_ADDR, RANK, TF_CONFIG, the MPI hostfile...) as under Kubeflow.

A field with no TrainingJob equivalent, or one the Kubeflow schema does not
know, is refused with its document and path, and nothing is written. What is
dropped on purpose (status, fields the API server sets) and behaviour that
differs are reported as warnings on standard error.`,
		Example: convertExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConvert(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), files)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file with the Kubeflow jobs to convert, - for standard input; repeatable")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// runConvert converts every file before it writes anything, so a refusal
// in the last file leaves standard output empty.
func runConvert(stdin io.Reader, stdout, stderr io.Writer, files []string) error {
	var jobs []convert.Converted
	var errs []error
	for _, name := range files {
		data, err := readInput(stdin, name)
		if err != nil {
			return err
		}
		res, err := convert.Convert(bytes.NewReader(data))
		if err != nil {
			errs = append(errs, prefixLines(displayName(name), err))
			continue
		}
		for _, w := range res.Warnings {
			fmt.Fprintf(stderr, "Warning: %s: %s\n", displayName(name), w)
		}
		jobs = append(jobs, res.Jobs...)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(jobs) == 0 {
		return errors.New("no Kubeflow jobs found in the input")
	}
	return convert.Write(stdout, jobs)
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return data, nil
}

func displayName(name string) string {
	if name == "-" {
		return "<stdin>"
	}
	return name
}

// prefixLines puts the file name before each refusal of a joined error.
func prefixLines(name string, err error) error {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return fmt.Errorf("%s: %w", name, err)
	}
	var out []error
	for _, e := range joined.Unwrap() {
		out = append(out, fmt.Errorf("%s: %w", name, e))
	}
	return errors.Join(out...)
}
