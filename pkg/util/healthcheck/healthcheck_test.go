package healthcheck

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

type syncer bool

func (s syncer) WaitForCacheSync(ctx context.Context) bool {
	if !s {
		<-ctx.Done()
	}
	return bool(s)
}

func TestCacheSynced(t *testing.T) {
	tests := []struct {
		name    string
		synced  bool
		wantErr bool
	}{
		{"synced", true, false},
		{"still listing", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CacheSynced(syncer(tc.synced), 10*time.Millisecond)(httptest.NewRequest("GET", "/readyz", nil))
			if (err != nil) != tc.wantErr {
				t.Errorf("CacheSynced = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
