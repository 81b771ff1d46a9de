package framework

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// FaultRules say what a FaultProxy injects. Fractions are of the requests
// the rule applies to, drawn from one random source seeded with Seed, so a
// run with the same request order injects the same faults.
type FaultRules struct {
	Seed int64
	// WatchMaxAge closes every watch stream after a random time between
	// half of it and all of it, by aborting the connection as a lost
	// apiserver or load balancer would (0: watches are left alone).
	WatchMaxAge time.Duration
	// StatusConflict answers this fraction of PUT and PATCH requests to a
	// status subresource with 409 Conflict, without forwarding them.
	StatusConflict float64
	// ServerError answers this fraction of bindings (POST pods/binding) and
	// status writes with 500 or 503 (503 with Retry-After). Half of them
	// are forwarded first, so the write happened and only its answer is
	// lost; the other half never reach the apiserver.
	ServerError float64
	// Latency is added to this fraction (LatencyFraction) of bindings and
	// status writes.
	Latency         time.Duration
	LatencyFraction float64
	// WatchDelay holds every event of a watch of a resource (its plural,
	// "resourceclaims") that long before passing it on, in order: a watch
	// that lags the component's other watches, as one on a loaded
	// apiserver's watch cache or behind a slow connection does. The
	// stream itself, its headers, start at once. A watch it holds back is
	// not also cut by WatchMaxAge.
	WatchDelay map[string]time.Duration
}

// Fault kinds, the keys of FaultProxy.Counts.
const (
	FaultWatchDropped = "watch_dropped"
	FaultConflict     = "conflict"
	FaultServerError  = "server_error"
	// FaultLostResponse is a ServerError whose write was forwarded and done.
	FaultLostResponse = "lost_response"
	FaultLatency      = "latency"
	// FaultWatchDelayed counts the watches WatchDelay held back.
	FaultWatchDelayed = "watch_delayed"
)

// FaultProxy is a reverse proxy in front of the apiserver that injects
// faults by FaultRules. It listens on loopback over TLS with a self-signed
// certificate of its own (client-go sends tokens only over TLS) and
// forwards over TLS with the cluster's CA; clients' credentials (their
// bearer tokens) pass through unchanged, so each component keeps its
// identity.
type FaultProxy struct {
	// URL is where clients reach the proxy; CAData is the PEM certificate
	// they must trust for it.
	URL    string
	CAData []byte

	rules    FaultRules
	listener net.Listener
	server   *http.Server
	proxy    *httputil.ReverseProxy

	mu     sync.Mutex
	random *rand.Rand
	// enabled turns injection on and off; the proxy forwards faithfully
	// while it is off.
	enabled atomic.Bool
	counts  sync.Map // kind -> *atomic.Int64
	// bindings is how many bindings the proxy holds now, from the client's
	// request until the answer (the apiserver's or an injected one) starts;
	// maxBindings the most it held at once.
	bindings, maxBindings atomic.Int64
	// held, while set, is the gate bindings wait at (HoldBindings).
	held atomic.Pointer[chan struct{}]
}

// HoldBindings makes every binding (POST pods/binding) wait at the proxy,
// unanswered and not forwarded, until ReleaseBindings: an apiserver that
// has stopped answering binds. It holds them whether or not the faults
// are enabled.
func (p *FaultProxy) HoldBindings() {
	gate := make(chan struct{})
	if old := p.held.Swap(&gate); old != nil {
		close(*old)
	}
}

// ReleaseBindings lets the held bindings, and every later one, through.
func (p *FaultProxy) ReleaseBindings() {
	if gate := p.held.Swap(nil); gate != nil {
		close(*gate)
	}
}

var (
	bindingPath = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$`)
)

// StartFaultProxy starts a proxy to the apiserver of upstream (whose server
// and CA are used; its credentials are not) with injection on.
func StartFaultProxy(upstream *rest.Config, rules FaultRules) (*FaultProxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: apiserver URL %q: %w", upstream.Host, err)
	}
	transport, err := rest.TransportFor(rest.AnonymousClientConfig(upstream))
	if err != nil {
		return nil, fmt.Errorf("fault proxy: transport: %w", err)
	}
	certPEM, cert, err := selfSignedLoopbackCert()
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{
		URL:      "https://" + l.Addr().String(),
		CAData:   certPEM,
		rules:    rules,
		listener: l,
		random:   rand.New(rand.NewSource(rules.Seed)), //nolint:gosec // fault injection, not security
	}
	p.enabled.Store(true)
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: transport,
		// Watches stream: pass every chunk on at once.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode >= 400 && os.Getenv("FAULTPROXY_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "fault proxy: %s %s %s: %d %v\n", resp.Request.Method, resp.Request.URL, resp.Request.Header, resp.StatusCode, resp.Header)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				fmt.Fprintf(os.Stderr, "fault proxy: %s %s: %v\n", r.Method, r.URL.Path, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.server = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// selfSignedLoopbackCert makes a certificate for 127.0.0.1 that is its
// own CA.
func selfSignedLoopbackCert() ([]byte, tls.Certificate, error) {
	certPEM, keyPEM, err := selfSignedLoopbackPEM("lockstep-fault-proxy")
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	return certPEM, cert, err
}

// selfSignedLoopbackPEM makes a serving certificate for 127.0.0.1 named cn,
// its own CA, and its key, PEM-encoded.
func selfSignedLoopbackPEM(cn string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// SetEnabled turns injection on or off.
func (p *FaultProxy) SetEnabled(on bool) { p.enabled.Store(on) }

// Counts returns how many faults of each kind were injected.
func (p *FaultProxy) Counts() map[string]int64 {
	out := map[string]int64{}
	// FaultWatchDelayed is listed only once injected: the rule is a test's
	// own, not one of the faults TestConvergesUnderAPIFaults waits to see
	// every kind of.
	for _, k := range []string{FaultWatchDropped, FaultConflict, FaultServerError, FaultLostResponse, FaultLatency} {
		out[k] = 0
	}
	p.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// MaxBindingsInFlight is the most bindings (POST pods/binding) the proxy
// held at once, from a client's request until its answer starts.
func (p *FaultProxy) MaxBindingsInFlight() int64 { return p.maxBindings.Load() }

// Close stops the proxy and cuts the connections through it.
func (p *FaultProxy) Close() error {
	return p.server.Close()
}

func (p *FaultProxy) count(kind string) {
	v, _ := p.counts.LoadOrStore(kind, &atomic.Int64{})
	v.(*atomic.Int64).Add(1)
}

// chance draws one number in [0,1) from the seeded source.
func (p *FaultProxy) chance() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.random.Float64()
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	isBinding := r.Method == http.MethodPost && bindingPath.MatchString(r.URL.Path)
	if isBinding {
		n := p.bindings.Add(1)
		for m := p.maxBindings.Load(); n > m; m = p.maxBindings.Load() {
			if p.maxBindings.CompareAndSwap(m, n) {
				break
			}
		}
		// A binding leaves the count as its answer starts: the client
		// cannot have the whole answer, and send its next binding, before
		// that. Counting until the handler returns would also count the
		// client's next binding while this handler finishes.
		answered := &answerWriter{ResponseWriter: w, done: func() { p.bindings.Add(-1) }}
		defer answered.answer()
		w = answered
		if gate := p.held.Load(); gate != nil {
			select {
			case <-*gate:
			case <-r.Context().Done():
				return
			}
		}
	}
	if !p.enabled.Load() {
		p.proxy.ServeHTTP(w, r)
		return
	}
	isWatch := r.Method == http.MethodGet && (r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1")
	isStatus := (r.Method == http.MethodPut || r.Method == http.MethodPatch) && strings.HasSuffix(r.URL.Path, "/status")
	switch {
	case isWatch && p.rules.WatchDelay[watchedResource(r.URL.Path)] > 0:
		p.count(FaultWatchDelayed)
		p.serveDelayedWatch(w, r, p.rules.WatchDelay[watchedResource(r.URL.Path)])
		return
	case isWatch && p.rules.WatchMaxAge > 0:
		p.serveWatch(w, r)
		return
	case isStatus || isBinding:
		if p.rules.LatencyFraction > 0 && p.chance() < p.rules.LatencyFraction {
			p.count(FaultLatency)
			select {
			case <-time.After(p.rules.Latency):
			case <-r.Context().Done():
				return
			}
		}
		if isStatus && p.chance() < p.rules.StatusConflict {
			p.count(FaultConflict)
			writeStatus(w, http.StatusConflict, "Conflict", "injected conflict: the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		if p.chance() < p.rules.ServerError {
			lost := p.chance() < 0.5
			code, reason := http.StatusInternalServerError, "InternalError"
			if p.chance() < 0.5 {
				code, reason = http.StatusServiceUnavailable, "ServiceUnavailable"
				w.Header().Set("Retry-After", "1")
			}
			if lost {
				// Do the write, then lose its answer.
				p.count(FaultLostResponse)
				p.proxy.ServeHTTP(discardResponse{header: http.Header{}}, r)
			} else {
				p.count(FaultServerError)
			}
			writeStatus(w, code, reason, "injected server error")
			return
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// serveWatch forwards a watch and aborts it after a random part of
// WatchMaxAge.
func (p *FaultProxy) serveWatch(w http.ResponseWriter, r *http.Request) {
	after := p.rules.WatchMaxAge/2 + time.Duration(p.chance()*float64(p.rules.WatchMaxAge/2))
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	timer := time.AfterFunc(after, func() {
		p.count(FaultWatchDropped)
		cancel()
	})
	defer timer.Stop()
	// Cancelling the upstream request ends the copy with an error, on which
	// ReverseProxy aborts the client connection (http.ErrAbortHandler): the
	// client sees its stream cut, not a clean end.
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// watchedResource is the resource a watch's path names: the segment after
// the group version, or after namespaces/<name> under it.
func watchedResource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		return parts[2]
	}
	return parts[0]
}

// serveDelayedWatch forwards a watch and passes each chunk of it (an event,
// as the apiserver flushes them) on delay after it came, in order.
func (p *FaultProxy) serveDelayedWatch(w http.ResponseWriter, r *http.Request, delay time.Duration) {
	d := &delayedWriter{ResponseWriter: w, delay: delay, chunks: make(chan delayedChunk, 1024), done: make(chan struct{})}
	go d.run(r.Context())
	// Deferred: ReverseProxy aborts a stream it cannot copy by panicking
	// (http.ErrAbortHandler), and the server then flushes the connection;
	// run must have stopped writing to it by then.
	defer func() {
		close(d.chunks)
		<-d.done
	}()
	p.proxy.ServeHTTP(d, r)
}

type delayedChunk struct {
	at   time.Time
	data []byte
}

// delayedWriter queues what the proxy writes and run writes it out delay
// later. Only run writes to the client once the first chunk came; before
// that Flush sends the headers, so the client sees its watch start.
type delayedWriter struct {
	http.ResponseWriter
	delay  time.Duration
	chunks chan delayedChunk
	done   chan struct{}
	wrote  bool
}

func (d *delayedWriter) Write(b []byte) (int, error) {
	d.wrote = true
	d.chunks <- delayedChunk{at: time.Now().Add(d.delay), data: bytes.Clone(b)}
	return len(b), nil
}

func (d *delayedWriter) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok && !d.wrote {
		f.Flush()
	}
}

func (d *delayedWriter) run(ctx context.Context) {
	defer close(d.done)
	f, _ := d.ResponseWriter.(http.Flusher)
	for c := range d.chunks {
		select {
		case <-time.After(time.Until(c.at)):
		case <-ctx.Done():
			// Keep taking chunks so the proxy's writes never block.
			for range d.chunks {
			}
			return
		}
		if _, err := d.ResponseWriter.Write(c.data); err != nil {
			for range d.chunks {
			}
			return
		}
		if f != nil {
			f.Flush()
		}
	}
}

// writeStatus answers with a metav1.Status the way the apiserver does.
func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
}

// answerWriter calls done once, when the answer starts (or the handler
// returns without one).
type answerWriter struct {
	http.ResponseWriter
	once sync.Once
	done func()
}

func (a *answerWriter) answer() { a.once.Do(a.done) }

func (a *answerWriter) WriteHeader(code int) {
	a.answer()
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.answer()
	return a.ResponseWriter.Write(b)
}

// Flush passes a flush on: ReverseProxy flushes through the writer it is
// given.
func (a *answerWriter) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// discardResponse swallows a forwarded answer.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d discardResponse) WriteHeader(int)             {}

// ProxiedKubeconfig writes a kubeconfig of the identity (its token) whose
// server is the proxy, for a component to run behind a FaultProxy, and
// returns its path.
func (c *Cluster) ProxiedKubeconfig(id localcluster.Identity, proxy *FaultProxy) (string, error) {
	src, err := c.IdentityKubeconfig(id)
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return "", err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = proxy.URL
		cl.CertificateAuthority, cl.CertificateAuthorityData = "", proxy.CAData
		cl.InsecureSkipTLSVerify = false
	}
	path := filepath.Join(c.Dir, "identities", id.Namespace+"."+id.Name+".proxied.kubeconfig")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}

// ProxiedSchedulerComponent describes lockstep-scheduler as
// SchedulerComponent does, reaching the apiserver through proxy.
func (c *Cluster) ProxiedSchedulerComponent(name string, proxy *FaultProxy) (localcluster.Component, error) {
	cfg, err := localcluster.DeployedSchedulerConfig(c.RepoRoot)
	if err != nil {
		return localcluster.Component{}, err
	}
	api, err := c.ProxiedKubeconfig(localcluster.SchedulerIdentity(), proxy)
	if err != nil {
		return localcluster.Component{}, err
	}
	return c.KubeSchedulerComponentWith(name, localcluster.SchedulerName, cfg, localcluster.SchedulerOptions{APIKubeconfig: api})
}

// ProxiedControllerComponent describes the TrainingJob controller as
// ControllerComponent does, reaching the apiserver through proxy.
func (c *Cluster) ProxiedControllerComponent(proxy *FaultProxy) (localcluster.Component, error) {
	comp, err := c.ControllerComponent()
	if err != nil {
		return localcluster.Component{}, err
	}
	proxied, err := c.ProxiedKubeconfig(localcluster.ControllerIdentity(), proxy)
	if err != nil {
		return localcluster.Component{}, err
	}
	for i, a := range comp.Args {
		if strings.HasPrefix(a, "--kubeconfig=") {
			comp.Args[i] = "--kubeconfig=" + proxied
		}
	}
	return comp, nil
}
