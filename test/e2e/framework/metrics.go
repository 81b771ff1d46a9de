package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// Endpoints are the URLs where a running component serves its metrics and
// health probes.
type Endpoints struct {
	Metrics, Healthz, Readyz string
	// Secure is set where /metrics is HTTPS with a self-signed certificate
	// behind delegated authentication and authorization (kube-scheduler's
	// secure port; our binaries unless --metrics-secure=false). The health
	// paths are open to anyone: on kube-scheduler's secure port, or on our
	// binaries' plain HTTP health port.
	Secure bool
}

// Endpoints reads where the running component name serves metrics and
// health from its command line (endpointsFromArgs). The flags, not the
// localcluster.Component that started it, are the truth for a component
// restarted on new ports.
func (c *Cluster) Endpoints(name string) (Endpoints, error) {
	p, ok := c.Component(name)
	if !ok {
		return Endpoints{}, fmt.Errorf("component %s is not running", name)
	}
	return endpointsFromArgs(name, p.Args())
}

// endpointsFromArgs reads the endpoints of component name from its
// arguments: --secure-port and --bind-address for kube-scheduler,
// --metrics-bind-address, --metrics-secure and --health-probe-bind-address
// for our controller-runtime binaries.
func endpointsFromArgs(name string, args []string) (Endpoints, error) {
	flags := map[string]string{}
	for _, arg := range args {
		if k, v, ok := strings.Cut(strings.TrimLeft(arg, "-"), "="); ok {
			flags[k] = v
		}
	}
	if port := flags["secure-port"]; port != "" {
		base := "https://" + net.JoinHostPort(flags["bind-address"], port)
		return Endpoints{Metrics: base + "/metrics", Healthz: base + "/healthz", Readyz: base + "/readyz", Secure: true}, nil
	}
	metricsAddr, healthAddr := flags["metrics-bind-address"], flags["health-probe-bind-address"]
	if metricsAddr == "" || healthAddr == "" {
		return Endpoints{}, fmt.Errorf("component %s: no metrics or health address among its flags %q", name, args)
	}
	secure := flags["metrics-secure"] != "false"
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	return Endpoints{
		Metrics: scheme + metricsAddr + "/metrics",
		Healthz: "http://" + healthAddr + "/healthz",
		Readyz:  "http://" + healthAddr + "/readyz",
		Secure:  secure,
	}, nil
}

// Get fetches url as the cluster's admin. The component's serving
// certificate is self-signed, so it is not verified: the admin's client
// certificate or token goes only to loopback ports the harness chose.
func (c *Cluster) Get(ctx context.Context, url string) (status int, body []byte, err error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.TLSClientConfig = rest.TLSClientConfig{
		Insecure: true,
		CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
		CertData: cfg.CertData, KeyData: cfg.KeyData,
	}
	return get(ctx, cfg, url)
}

// GetWithToken fetches url with only a bearer token (none when empty), as a
// scraper does; the serving certificate is not verified (loopback ports).
func (c *Cluster) GetWithToken(ctx context.Context, url, token string) (status int, body []byte, err error) {
	cfg := &rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	return get(ctx, cfg, url)
}

func get(ctx context.Context, cfg *rest.Config, url string) (status int, body []byte, err error) {
	cfg.Timeout = 10 * time.Second
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, nil, fmt.Errorf("building a client for %s: %w", url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return resp.StatusCode, body, nil
}

// Sample is one series of a scrape. Histograms give three: name_count,
// name_sum and, per bucket, name_bucket with its le label.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples are a scrape's series.
type Samples []Sample

// Find returns the samples named name whose labels include every label of
// match.
func (s Samples) Find(name string, match map[string]string) Samples {
	var out Samples
	for _, sample := range s {
		if sample.Name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if sample.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, sample)
		}
	}
	return out
}

// Sum adds up the values of the samples.
func (s Samples) Sum() float64 {
	total := 0.0
	for _, sample := range s {
		total += sample.Value
	}
	return total
}

// Scrape reads a component's /metrics as a metrics scraper does: with a
// token of localcluster.MetricsScraperIdentity, which deploy/'s lockstep-metrics-reader
// lets get /metrics.
func (c *Cluster) Scrape(ctx context.Context, component string) (Samples, error) {
	ep, err := c.Endpoints(component)
	if err != nil {
		return nil, err
	}
	token, err := c.Token(ctx, localcluster.MetricsScraperIdentity(), nil, 600)
	if err != nil {
		return nil, err
	}
	status, body, err := c.GetWithToken(ctx, ep.Metrics, token)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d: %s", ep.Metrics, status, bytes.TrimSpace(body))
	}
	return parseSamples(body)
}

func parseSamples(text []byte) (Samples, error) {
	families, err := testutil.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	var out Samples
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				out = append(out,
					Sample{Name: name + "_count", Labels: labels, Value: float64(h.GetSampleCount())},
					Sample{Name: name + "_sum", Labels: labels, Value: h.GetSampleSum()})
				for _, b := range h.GetBucket() {
					bucketLabels := map[string]string{"le": fmt.Sprint(b.GetUpperBound())}
					for k, v := range labels {
						bucketLabels[k] = v
					}
					out = append(out, Sample{Name: name + "_bucket", Labels: bucketLabels, Value: float64(b.GetCumulativeCount())})
				}
			case m.GetCounter() != nil:
				out = append(out, Sample{Name: name, Labels: labels, Value: m.GetCounter().GetValue()})
			case m.GetGauge() != nil:
				out = append(out, Sample{Name: name, Labels: labels, Value: m.GetGauge().GetValue()})
			case m.GetUntyped() != nil:
				out = append(out, Sample{Name: name, Labels: labels, Value: m.GetUntyped().GetValue()})
			}
		}
	}
	return out, nil
}
