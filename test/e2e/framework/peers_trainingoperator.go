package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"
)

// Kubeflow training-operator v1 as a peer of Lockstep (docs/interop.md): the
// operator's own binary, built by hack/tools.sh from the pin in
// hack/tools/training-operator/go.mod, runs as a process against the cluster
// the way its Deployment would run it.

// TrainingOperatorModule is the Go module the operator is built from.
const TrainingOperatorModule = "github.com/kubeflow/training-operator"

// TrainingOperatorSchemes are the job kinds the suite's operator runs
// (--enable-scheme): only their controllers start, and only their CRDs are
// installed.
var TrainingOperatorSchemes = []string{"PyTorchJob", "MPIJob"}

// TrainingOperatorIdentity is the operator's ServiceAccount, as its upstream
// manifests (manifests/overlays/standalone) name it.
func TrainingOperatorIdentity() localcluster.Identity {
	return localcluster.Identity{Namespace: "kubeflow", Name: "training-operator"}
}

const (
	// trainingOperatorCertSecret, trainingOperatorService: the operator's
	// --webhook-secret-name and --webhook-service-name defaults. Its cert
	// rotator only updates the Secret, so it must exist before the operator
	// starts, as upstream's manifests create it.
	trainingOperatorCertSecret = "training-operator-webhook-cert"
	trainingOperatorService    = "training-operator"
	// trainingOperatorCAName is the CA name its rotator checks the CA
	// certificate against (pkg/cert in the module).
	trainingOperatorCAName = "training-operator-ca"
	// trainingOperatorMountedCertDir is where the operator's rotator looks
	// for the mounted Secret before it declares certificates ready: a
	// constant of the operator, not a flag.
	trainingOperatorMountedCertDir = "/tmp/k8s-webhook-server/serving-certs"
)

// toolModuleDir returns the source directory of module at the version the
// tool module hack/tools/<tool> pins, downloading it if the module cache
// lacks it. Peers' manifests (CRDs, RBAC) are read from there, so they
// always match the binary hack/tools.sh built from the same pin.
func (c *Cluster) toolModuleDir(ctx context.Context, tool, module string) (string, error) {
	toolDir := filepath.Join(c.RepoRoot, "hack", "tools", tool)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = toolDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s in %s: %w: %s", module, toolDir, err, strings.TrimSpace(stderr.String()))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download %s: reading its output: %w", module, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s in %s: no source directory: %s", module, toolDir, mod.Error)
	}
	return mod.Dir, nil
}

// InstallTrainingOperator prepares the cluster for the operator: the CRDs
// of TrainingOperatorSchemes from the module's manifests/base/crds (waiting
// until each is established), its namespace, ServiceAccount, upstream
// ClusterRole and binding, and the Secret its webhook certificates live in.
// It is idempotent.
func (c *Cluster) InstallTrainingOperator(ctx context.Context) error {
	dir, err := c.toolModuleDir(ctx, "training-operator", TrainingOperatorModule)
	if err != nil {
		return err
	}
	if err := c.installTrainingOperatorCRDs(ctx, filepath.Join(dir, "manifests", "base", "crds")); err != nil {
		return err
	}
	id := TrainingOperatorIdentity()
	ns, sa := id.Objects()
	objs := []*unstructured.Unstructured{
		ns, sa,
	}
	rolePath := filepath.Join(dir, "manifests", "base", "rbac", "role.yaml")
	roles, err := localcluster.ReadObjects(rolePath)
	if err != nil {
		return err
	}
	for _, r := range roles {
		if r.GetKind() != "ClusterRole" {
			continue
		}
		objs = append(objs, r, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": r.GetName()},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": r.GetName()},
			"subjects": []any{id.Subject()},
		}})
	}
	if len(objs) == 2 {
		return fmt.Errorf("%s holds no ClusterRole for the operator", rolePath)
	}
	return c.Apply(ctx, objs...)
}

func (c *Cluster) installTrainingOperatorCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, kind := range TrainingOperatorSchemes {
		want[kind] = true
	}
	// Only the schemes the operator runs; each found is crossed off.
	err = c.ApplyCRDFiles(ctx, files, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		if !want[crd.Spec.Names.Kind] {
			return false
		}
		delete(want, crd.Spec.Names.Kind)
		return true
	})
	if err != nil {
		return err
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for kind := range want {
			missing = append(missing, kind)
		}
		slices.Sort(missing)
		return fmt.Errorf("no CRD for %v in %s", missing, dir)
	}
	return nil
}

// TrainingOperatorComponent describes the operator run as its
// ServiceAccount with Lockstep as its gang scheduler: it then gives every
// pod schedulerName lockstep-scheduler and the job's scheduler-plugins
// PodGroup (scheduling.x-k8s.io/v1alpha1, minMember = all replicas unless
// schedulingPolicy.minAvailable says otherwise). Metrics, health and webhook
// ports are free loopback ports (the webhook server listens on all
// interfaces: the operator has no flag for its host). Call
// InstallTrainingOperator first.
//
// Its webhook certificates are made here, as a cert-manager or an earlier
// run of the operator would have left them: in the Secret, and in the
// directory its webhook server reads, which TMPDIR moves into the cluster's
// directory. The rotator's readiness check looks for the mounted Secret at
// a fixed /tmp path instead; a certificate is put there only if none is,
// since nothing but that existence check reads it. No
// ValidatingWebhookConfiguration is installed: the apiserver could not
// reach the webhook's Service, so the jobs are validated by their CRD
// schemas only.
func (c *Cluster) TrainingOperatorComponent(ctx context.Context) (localcluster.Component, error) {
	id := TrainingOperatorIdentity()
	ports, err := localcluster.FreePorts(3)
	if err != nil {
		return localcluster.Component{}, err
	}
	kubeconfig, err := c.IdentityKubeconfig(id)
	if err != nil {
		return localcluster.Component{}, err
	}
	tmp := filepath.Join(c.Dir, "training-operator")
	if err := c.trainingOperatorCerts(ctx, filepath.Join(tmp, "k8s-webhook-server", "serving-certs")); err != nil {
		return localcluster.Component{}, err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		trainingOperatorWebhookFlag + strconv.Itoa(ports[2]),
		"--leader-elect=false",
		"--gang-scheduler-name=" + localcluster.SchedulerName,
	}
	for _, s := range TrainingOperatorSchemes {
		args = append(args, "--enable-scheme="+strings.ToLower(s))
	}
	return localcluster.Component{
		Name:   "training-operator",
		Binary: "training-operator",
		Args:   args,
		Env:    []string{"MY_POD_NAMESPACE=" + id.Namespace, "TMPDIR=" + tmp},
		// Ready once its certificates are in place and its webhook server
		// listens; it registers its job controllers at that moment.
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]),
	}, nil
}

// trainingOperatorWebhookFlag sets the port of the operator's webhook
// server, which listens on every interface: the operator has no flag for
// its host.
const trainingOperatorWebhookFlag = "--webhook-server-port="

// WildcardPorts are the ports the named component, run with args, binds on
// every interface because it offers no way to bind them to loopback: the
// training-operator's webhook server. Every other listener of every
// component the harness starts is on 127.0.0.1.
func WildcardPorts(name string, args []string) map[int]bool {
	ports := map[int]bool{}
	if name != "training-operator" {
		return ports
	}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, trainingOperatorWebhookFlag); ok {
			if port, err := strconv.Atoi(v); err == nil {
				ports[port] = true
			}
		}
	}
	return ports
}

// trainingOperatorCerts makes a CA and a serving certificate the operator's
// rotator accepts (the CA named trainingOperatorCAName, the server named
// <service>.<namespace>.svc, both valid well past its 90-day lookahead),
// stores them in its Secret unless that already holds a set, and writes the
// Secret's serving pair into certDir, as a Secret volume would.
func (c *Cluster) trainingOperatorCerts(ctx context.Context, certDir string) error {
	id := TrainingOperatorIdentity()
	secrets := c.Clientset.CoreV1().Secrets(id.Namespace)
	secret, err := secrets.Get(ctx, trainingOperatorCertSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		data, genErr := trainingOperatorCertData(fmt.Sprintf("%s.%s.svc", trainingOperatorService, id.Namespace))
		if genErr != nil {
			return genErr
		}
		secret, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: trainingOperatorCertSecret, Namespace: id.Namespace},
			Data:       data,
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("the training-operator's certificate Secret %s/%s: %w", id.Namespace, trainingOperatorCertSecret, err)
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(secret.Data[key]) == 0 {
			return fmt.Errorf("the training-operator's certificate Secret %s/%s has no %s: delete it to have it made again", id.Namespace, trainingOperatorCertSecret, key)
		}
		if err := os.WriteFile(filepath.Join(certDir, key), secret.Data[key], 0o600); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(trainingOperatorMountedCertDir, 0o755); err != nil {
		return fmt.Errorf("making %s for the training-operator's readiness check: %w", trainingOperatorMountedCertDir, err)
	}
	f, err := os.OpenFile(filepath.Join(trainingOperatorMountedCertDir, corev1.TLSCertKey), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(secret.Data[corev1.TLSCertKey])
	return errors.Join(err, f.Close())
}

// trainingOperatorCertData returns the Secret data the operator's rotator
// writes itself: ca.crt and ca.key (PKCS#1, which it parses), tls.crt and
// tls.key for dnsName.
func trainingOperatorCertData(dnsName string) (map[string][]byte, error) {
	now := time.Now()
	notAfter := now.Add(10 * 365 * 24 * time.Hour)
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: trainingOperatorCAName},
		DNSNames:              []string{trainingOperatorCAName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: dnsName},
		DNSNames:              []string{dnsName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	certPEM := func(der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}) }
	keyPEM := func(k *rsa.PrivateKey) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	}
	return map[string][]byte{
		"ca.crt":                certPEM(caDER),
		"ca.key":                keyPEM(caKey),
		corev1.TLSCertKey:       certPEM(der),
		corev1.TLSPrivateKeyKey: keyPEM(key),
	}, nil
}

// StartTrainingOperator installs what the operator needs and starts it,
// returning once it is ready.
func (c *Cluster) StartTrainingOperator(ctx context.Context) (*localcluster.Process, error) {
	if err := c.InstallTrainingOperator(ctx); err != nil {
		return nil, err
	}
	comp, err := c.TrainingOperatorComponent(ctx)
	if err != nil {
		return nil, err
	}
	return c.StartComponent(ctx, comp)
}
