package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEndpointsFromFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Endpoints
	}{
		{"kube-scheduler", []string{"--config=x", "--bind-address=127.0.0.1", "--secure-port=4443"}, Endpoints{
			Metrics: "https://127.0.0.1:4443/metrics", Healthz: "https://127.0.0.1:4443/healthz", Readyz: "https://127.0.0.1:4443/readyz", Secure: true,
		}},
		{"controller-runtime manager", []string{"--metrics-bind-address=127.0.0.1:1", "--health-probe-bind-address=127.0.0.1:2", "--v=2"}, Endpoints{
			Metrics: "https://127.0.0.1:1/metrics", Healthz: "http://127.0.0.1:2/healthz", Readyz: "http://127.0.0.1:2/readyz", Secure: true,
		}},
		{"controller-runtime manager, insecure metrics", []string{"--metrics-bind-address=127.0.0.1:1", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:2"}, Endpoints{
			Metrics: "http://127.0.0.1:1/metrics", Healthz: "http://127.0.0.1:2/healthz", Readyz: "http://127.0.0.1:2/readyz",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := endpointsFromArgs("c", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("endpoints (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseSamples(t *testing.T) {
	text := `# TYPE jobs gauge
jobs{state="Running"} 2
# TYPE wait_seconds histogram
wait_seconds_bucket{le="1"} 1
wait_seconds_bucket{le="+Inf"} 3
wait_seconds_sum 7.5
wait_seconds_count 3
`
	s, err := parseSamples([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{
		"jobs":       s.Find("jobs", map[string]string{"state": "Running"}).Sum(),
		"count":      s.Find("wait_seconds_count", nil).Sum(),
		"sum":        s.Find("wait_seconds_sum", nil).Sum(),
		"bucket le1": s.Find("wait_seconds_bucket", map[string]string{"le": "1"}).Sum(),
	}
	want := map[string]float64{"jobs": 2, "count": 3, "sum": 7.5, "bucket le1": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want,+got):\n%s", diff)
	}
}
