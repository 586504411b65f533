package conformance

import "testing"

// TestRWLock checks every promise of rwlock.Service against b.
func TestRWLock(t *testing.T, b Backend) { t.Helper(); b.check(t) }
