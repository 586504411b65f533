package memio_test

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ahrtr/disco/memio"
)

// WithLogger's logger hears of a session's start, its loss (at Warn, as on
// the other backends) and its Close.
func TestSessionLogs(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	st := memio.NewStore()
	lost, err := memio.NewSession(st, memio.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	lost.Expire()
	if n := logs.FilterMessage("session lost").FilterField(zap.Int64("session", lost.LeaseID())).Len(); n != 1 {
		t.Errorf("Expire: %d Warn %q logs of the session, want 1; logs: %v", n, "session lost", logs.All())
	}
	closed, err := memio.NewSession(st, memio.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"session started", "session closed"} {
		if logs.FilterMessage(msg).FilterField(zap.Int64("session", closed.LeaseID())).Len() != 1 {
			t.Errorf("no %q log of the closed session; logs: %v", msg, logs.All())
		}
	}
	for _, e := range logs.FilterMessage("session lost").All() {
		if e.Level != zap.WarnLevel {
			t.Errorf("%q logged at %v, want Warn", e.Message, e.Level)
		}
	}
}
