package conformance

import "testing"

// TestElection checks every promise of election.Service against b.
func TestElection(t *testing.T, b Backend) { t.Helper(); b.check(t) }
