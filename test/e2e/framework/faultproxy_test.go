package framework

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// TestFaultProxy forwards to a TLS upstream with the caller's token, and
// injects each kind of fault where its rule says.
func TestFaultProxy(t *testing.T) {
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	}))
	defer upstream.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw})
	cfg := &rest.Config{Host: upstream.URL, BearerToken: "admin", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}

	do := func(p *FaultProxy, method, path string) (int, string) {
		t.Helper()
		// Only writes carry a body, as from client-go. A watch GET with a
		// body races: once the proxy flushes the watch's headers, net/http
		// may close the HTTP/1 request body the upstream write still reads,
		// and the watch ends early without an injected fault.
		var payload io.Reader
		if method != http.MethodGet {
			payload = strings.NewReader("{}")
		}
		req, _ := http.NewRequest(method, p.URL+path, payload)
		req.Header.Set("Authorization", "Bearer component")
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(p.CAData)
		httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	quiet, err := StartFaultProxy(cfg, FaultRules{})
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	if code, body := do(quiet, http.MethodGet, "/api"); code != 200 || body != "GET /api Bearer component" {
		t.Errorf("forwarded GET /api = %d %q, want 200 with the caller's token", code, body)
	}

	faulty, err := StartFaultProxy(cfg, FaultRules{Seed: 1, WatchMaxAge: 100 * time.Millisecond, StatusConflict: 0.5, ServerError: 0.5, Latency: time.Millisecond, LatencyFraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer faulty.Close()
	codes := map[int]int{}
	for range 40 {
		code, _ := do(faulty, http.MethodPut, "/api/v1/namespaces/ns/pods/p/status")
		codes[code]++
		code, _ = do(faulty, http.MethodPost, "/api/v1/namespaces/ns/pods/p/binding")
		codes[code]++
	}
	if code, _ := do(faulty, http.MethodGet, "/api/v1/pods"); code != 200 {
		t.Errorf("plain GET through the faulty proxy = %d, want 200", code)
	}
	start := time.Now()
	if code, _ := do(faulty, http.MethodGet, "/api/v1/pods?watch=true"); code != 200 && code != 0 {
		t.Errorf("watch = %d", code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("watch was not cut: it took %v", took)
	}
	counts := faulty.Counts()
	for kind, n := range counts {
		if n == 0 {
			t.Errorf("no %s fault injected: %v", kind, counts)
		}
	}
	if codes[200] == 0 || codes[409] == 0 || codes[500]+codes[503] == 0 {
		t.Errorf("answers %v, want some 200, 409 and 5xx", codes)
	}
	faulty.SetEnabled(false)
	for range 10 {
		if code, _ := do(faulty, http.MethodPut, "/api/v1/namespaces/ns/pods/p/status"); code != 200 {
			t.Errorf("with faults off: %d", code)
		}
	}
}

// A watch of a delayed resource starts at once (its headers), and each of
// its events reaches the client no sooner than the delay after the
// apiserver sent it, in order; watches of other resources are not held.
func TestFaultProxyDelaysWatches(t *testing.T) {
	const delay = 500 * time.Millisecond
	sent := make(chan time.Time, 4)
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		for _, event := range []string{"one\n", "two\n"} {
			sent <- time.Now()
			io.WriteString(w, event)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	defer upstream.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw})
	cfg := &rest.Config{Host: upstream.URL, BearerToken: "admin", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	p, err := StartFaultProxy(cfg, FaultRules{WatchDelay: map[string]time.Duration{"resourceclaims": delay}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	watch := func(path string) (events []string, at []time.Time) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for range 2 {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, line)
			at = append(at, time.Now())
		}
		return events, at
	}

	for _, path := range []string{"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", "/apis/resource.k8s.io/v1/resourceclaims"} {
		events, at := watch(path + "?watch=true")
		if diff := cmp.Diff([]string{"one\n", "two\n"}, events); diff != "" {
			t.Errorf("%s: events (-want +got):\n%s", path, diff)
		}
		for i := range at {
			if sentAt := <-sent; at[i].Sub(sentAt) < delay {
				t.Errorf("%s: event %d came %v after the apiserver sent it, want at least %v", path, i, at[i].Sub(sentAt), delay)
			}
		}
	}
	if got := p.Counts()[FaultWatchDelayed]; got != 2 {
		t.Errorf("%d watches delayed, want 2", got)
	}
	events, _ := watch("/api/v1/namespaces/ns/pods?watch=true")
	<-sent
	<-sent
	if got := p.Counts()[FaultWatchDelayed]; len(events) != 2 || got != 2 {
		t.Errorf("a pod watch: events %q, %d watches delayed in all; want both events, and the pod watch not delayed", events, got)
	}
}

func TestWatchedResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/pods":                                          "pods",
		"/api/v1/namespaces/ns/pods":                            "pods",
		"/apis/resource.k8s.io/v1/resourceclaims":               "resourceclaims",
		"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims": "resourceclaims",
		"/api/v1/namespaces":                                    "namespaces",
		"/healthz":                                              "",
	} {
		if got := watchedResource(path); got != want {
			t.Errorf("watchedResource(%q) = %q, want %q", path, got, want)
		}
	}
}
