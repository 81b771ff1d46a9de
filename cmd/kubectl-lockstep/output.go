package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// none marks an empty cell, as kubectl does.
const none = "<none>"

// addOutputFlag adds kubectl's -o for the machine-readable formats.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "output format: json or yaml; a table when not set")
}

func validateOutput(output string) error {
	switch output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unsupported output format %q: use -o json or -o yaml, or leave -o out for a table", output)
}

// printStructured writes v as indented JSON or as YAML.
func printStructured(out io.Writer, output string, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	if output == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding the output: %w", err)
		}
	} else {
		data = append(data, '\n')
	}
	_, err = out.Write(data)
	return err
}

// newTable aligns tab-separated columns with kubectl's spacing.
func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 6, 4, 3, ' ', 0)
}
