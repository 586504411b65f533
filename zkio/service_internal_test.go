package zkio

import (
	"errors"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// TestStoppedOnceDone: whoever sees a service done also sees why it
// stopped, so that a request made after Done is closed fails with the
// service's error (ErrLost), not with whatever else it met first.
func TestStoppedOnceDone(t *testing.T) {
	svc := &service{stop: make(chan struct{}), Shell: driver.NewShell(driver.Spec{Kind: "lock", Name: "zkio: lock /x"})}
	lost := errors.New("session expired")
	svc.Finish(errors.Join(lost, primitives.ErrLost))
	<-svc.Done()
	if err := svc.stopped(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("stopped once done: %v, want the service's error (ErrLost)", err)
	}
}
