package framework

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestTrainingOperatorCertData checks the certificates against what the
// operator's rotator (cert-controller v0.10) accepts without making new
// ones: the CA valid for its CA name and the server for the Service's DNS
// name, both still valid after its 90-day lookahead, the CA key in PKCS#1.
// Certificates it rejected would be replaced in the Secret, and the files
// the harness wrote from the Secret would no longer match it.
func TestTrainingOperatorCertData(t *testing.T) {
	const dnsName = "training-operator.kubeflow.svc"
	data, err := trainingOperatorCertData(dnsName)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(key string) *x509.Certificate {
		t.Helper()
		block, _ := pem.Decode(data[key])
		if block == nil {
			t.Fatalf("%s: no PEM block", key)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return c
	}
	ca, server := parse("ca.crt"), parse(corev1.TLSCertKey)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	lookahead := time.Now().Add(90 * 24 * time.Hour)
	tests := []struct {
		name string
		cert *x509.Certificate
		opts x509.VerifyOptions
	}{
		{"CA", ca, x509.VerifyOptions{DNSName: trainingOperatorCAName, Roots: roots, CurrentTime: lookahead}},
		{"server", server, x509.VerifyOptions{
			DNSName: dnsName, Roots: roots, CurrentTime: lookahead,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
	}
	for _, tc := range tests {
		if _, err := tc.cert.Verify(tc.opts); err != nil {
			t.Errorf("%s certificate: %v", tc.name, err)
		}
	}
	block, _ := pem.Decode(data["ca.key"])
	if block == nil {
		t.Fatal("ca.key: no PEM block")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		t.Errorf("ca.key is not PKCS#1, which the rotator parses: %v", err)
	}
	if _, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]); err != nil {
		t.Errorf("tls.crt and tls.key are no key pair: %v", err)
	}
}

func TestWildcardPorts(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want map[int]bool
	}{
		{"training-operator", []string{"--metrics-bind-address=127.0.0.1:1", "--webhook-server-port=31448"}, map[int]bool{31448: true}},
		{"training-operator", []string{"--metrics-bind-address=127.0.0.1:1"}, map[int]bool{}},
		// Only the peer that cannot bind to loopback is excused.
		{"scheduler", []string{"--webhook-server-port=31448"}, map[int]bool{}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, WildcardPorts(tc.name, tc.args)); diff != "" {
			t.Errorf("WildcardPorts(%s, %v) (-want +got):\n%s", tc.name, tc.args, diff)
		}
	}
}
