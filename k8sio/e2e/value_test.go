package e2e_test

import (
	"errors"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// A value that is not valid UTF-8 cannot come back as it was given: the
// term's annotation is a string that JSON (client-go's default encoding)
// carries with U+FFFD in place of the bad bytes. Campaign and Proclaim
// refuse it, before writing anything, with an error wrapping
// ErrInvalidArgument; a candidate on a JSON client never leads with a
// value other than its own.
func TestValueNotUTF8Refused(t *testing.T) {
	defer noneLeft(t)
	cfg := srv.Config()
	cfg.ContentType = "application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := k8sio.NewElection(cs, namespace, leaseName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := background(t)
	const bad = "node-\xff"
	if err := e.Campaign(ctx, bad); !errors.Is(err, primitives.ErrInvalidArgument) {
		l, lerr := e.Leader(ctx)
		t.Fatalf("Campaign(%q): %v (leader %q, %v), want an error wrapping ErrInvalidArgument", bad, err, l.Value, lerr)
	}
	if err := e.Campaign(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, bad); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Proclaim(%q): %v, want an error wrapping ErrInvalidArgument", bad, err)
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "node-1" {
		t.Fatalf("Leader after a refused Proclaim: %q, %v; want node-1", l.Value, err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
