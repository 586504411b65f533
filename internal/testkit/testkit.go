// Package testkit holds the helpers the backends' tests share: leak checks,
// polling with a deadline, and closing what a test made.
package testkit

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// NoLeaks fails t if goroutines started during the test outlive it.
func NoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// Eventually polls cond until it holds, failing t after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// ClosedAtEnd returns a function that fails t on err and otherwise closes
// the service it is given when t ends.
func ClosedAtEnd[S interface{ Close() error }](t testing.TB) func(S, error) S {
	return func(s S, err error) S {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}
