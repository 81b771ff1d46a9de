package securemetrics

import (
	"flag"
	"testing"
)

func TestSecureByDefault(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.AddFlags(fs, ":8080")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	opts := f.Options()
	if !opts.SecureServing || opts.FilterProvider == nil {
		t.Errorf("default metrics options %+v: want HTTPS with authentication and authorization", opts)
	}
	if err := fs.Parse([]string{"--metrics-secure=false"}); err != nil {
		t.Fatal(err)
	}
	if opts := f.Options(); opts.SecureServing || opts.FilterProvider != nil {
		t.Errorf("--metrics-secure=false: got %+v, want plain HTTP", opts)
	}
}
