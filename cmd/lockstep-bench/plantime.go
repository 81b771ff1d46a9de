package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// planDurationMetric is TopologyPlacement's histogram of the time PreFilter
// spends planning a gang (pkg/scheduler/topologyplacement/metrics.go).
const planDurationMetric = "lockstep_scheduler_plan_duration_seconds"

// schedulerComponent is the name the replays run their scheduler under.
const schedulerComponent = "scheduler"

// scrapePlanTime reads the plan time from the replay's scheduler's
// /metrics; nil when the scheduler has no TopologyPlacement or planned
// nothing.
func scrapePlanTime(ctx context.Context, c *localcluster.Cluster) (*bench.PlanTime, error) {
	body, err := schedulerGet(ctx, c, "/metrics")
	if err != nil {
		return nil, err
	}
	return planTime(body)
}

// schedulerGet GETs path from the cluster's running scheduler, on its
// secure port as the cluster's admin.
func schedulerGet(ctx context.Context, c *localcluster.Cluster, path string) ([]byte, error) {
	p, ok := c.Component(schedulerComponent)
	if !ok {
		return nil, fmt.Errorf("component %s is not running", schedulerComponent)
	}
	port := ""
	for _, arg := range p.Args() {
		if v, ok := strings.CutPrefix(arg, "--secure-port="); ok {
			port = v
		}
	}
	if port == "" {
		return nil, fmt.Errorf("component %s has no --secure-port among %q", schedulerComponent, p.Args())
	}
	// The serving certificate is self-signed; the admin's credentials go
	// only to the loopback port the harness chose.
	cfg := rest.CopyConfig(c.Config)
	cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true,
		CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CertData: cfg.CertData, KeyData: cfg.KeyData}
	cfg.Timeout = 30 * time.Second
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	url := "https://127.0.0.1:" + port + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// planTime summarizes planDurationMetric of a /metrics page over all its
// outcomes; nil when the page has none.
func planTime(page []byte) (*bench.PlanTime, error) {
	families, err := testutil.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	f, ok := families[planDurationMetric]
	if !ok {
		return nil, nil
	}
	var (
		count   uint64
		sum     float64
		buckets []bench.Bucket
	)
	// Every outcome's histogram has the same bounds: added up bound by
	// bound they are the histogram of all plans.
	at := map[float64]int{}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			return nil, fmt.Errorf("%s is a %s, not a histogram", planDurationMetric, f.GetType())
		}
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			i, seen := at[b.GetUpperBound()]
			if !seen {
				i = len(buckets)
				at[b.GetUpperBound()] = i
				buckets = append(buckets, bench.Bucket{UpperBound: b.GetUpperBound()})
			}
			buckets[i].Count += b.GetCumulativeCount()
		}
	}
	return bench.NewPlanTime(count, sum, buckets), nil
}
