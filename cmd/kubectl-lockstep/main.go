// Command kubectl-lockstep is Lockstep's kubectl plugin. Installed on PATH
// it runs as `kubectl lockstep`.
package main

import (
	"os"
)

func main() {
	if err := newRootCommand(os.Stdin, os.Stdout, os.Stderr, connectKubeconfig).Execute(); err != nil {
		// cobra has printed the error.
		os.Exit(1)
	}
}
