// Package securemetrics serves a controller-runtime manager's /metrics the
// way kube-scheduler serves its own: over HTTPS, and only to callers the
// apiserver authenticates (TokenReview) and authorizes (SubjectAccessReview
// for get on the non-resource URL /metrics). The component's ServiceAccount
// needs create on tokenreviews and subjectaccessreviews; the scraper needs
// get on /metrics (deploy/default ships lockstep-metrics-reader).
package securemetrics

import (
	"flag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are a component's metrics serving flags.
type Flags struct {
	BindAddress string
	// Secure serves HTTPS behind authentication and authorization; off
	// serves plain HTTP to anyone who reaches the port (local debugging).
	Secure bool
	// CertDir holds tls.crt and tls.key (e.g. from cert-manager); empty
	// uses a self-signed certificate made at start, kept in memory.
	CertDir string
}

// AddFlags registers --metrics-bind-address, --metrics-secure and
// --metrics-cert-dir.
func (f *Flags) AddFlags(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&f.BindAddress, "metrics-bind-address", defaultAddr, "address of the Prometheus metrics endpoint; 0 disables it")
	fs.BoolVar(&f.Secure, "metrics-secure", true, "serve metrics over HTTPS to callers the apiserver authenticates and authorizes (get on /metrics); false serves plain HTTP to anyone")
	fs.StringVar(&f.CertDir, "metrics-cert-dir", "", "directory with the metrics server's tls.crt and tls.key; a self-signed certificate when empty")
}

// Options returns the manager's metrics server options.
func (f *Flags) Options() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: f.BindAddress}
	if f.Secure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.CertDir = f.CertDir
	}
	return opts
}
