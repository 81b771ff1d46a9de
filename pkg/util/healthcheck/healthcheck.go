// Package healthcheck holds the readiness checks our controller-runtime
// managers share.
package healthcheck

import (
	"context"
	"errors"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// Syncer is the part of a controller-runtime cache a check needs.
type Syncer interface {
	WaitForCacheSync(ctx context.Context) bool
}

// CacheSynced fails until every informer of c has started and synced. It
// waits at most timeout per probe, so a probe never hangs on a cache that
// is still listing. Caches run on every replica, leader or not, so a
// standby replica is ready as soon as it could take over.
func CacheSynced(c Syncer, timeout time.Duration) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), timeout)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches have not synced")
		}
		return nil
	}
}
