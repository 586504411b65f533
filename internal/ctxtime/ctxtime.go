// Package ctxtime has the one timing helper disco's packages share.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether it waited the
// whole d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
