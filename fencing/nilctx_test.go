package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ahrtr/disco/fencing"
)

// TestNilContext: a nil context is bad input. The readers of incoming
// metadata return an error that says so (wrapping ErrNoToken, or
// ErrNoScope, but not ErrMalformedToken: nothing malformed was sent); the
// makers of outgoing contexts, which have no error to return, panic with
// a message naming themselves, as the standard library's derivations of a
// context (context.WithValue) do, rather than with a nil dereference.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	for _, c := range []struct {
		name      string
		call      func() error
		wantErr   []error // errors.Is must hold for each
		wantPanic string  // the panic's message must hold it
	}{
		{
			name:    "FromIncomingContext",
			call:    func() error { _, err := fencing.FromIncomingContext(nilCtx); return err },
			wantErr: []error{fencing.ErrNoToken},
		},
		{
			name:    "ScopeFromIncomingContext",
			call:    func() error { _, err := fencing.ScopeFromIncomingContext(nilCtx); return err },
			wantErr: []error{fencing.ErrNoScope, fencing.ErrNoToken},
		},
		{
			name:      "NewOutgoingContext",
			call:      func() error { fencing.NewOutgoingContext(nilCtx, 5); return nil },
			wantPanic: "fencing: NewOutgoingContext: nil context",
		},
		{
			name:      "NewOutgoingContext without a token",
			call:      func() error { fencing.NewOutgoingContext(nilCtx, 0); return nil },
			wantPanic: "fencing: NewOutgoingContext: nil context",
		},
		{
			name:      "NewScopedOutgoingContext",
			call:      func() error { fencing.NewScopedOutgoingContext(nilCtx, "/a", 5); return nil },
			wantPanic: "fencing: NewScopedOutgoingContext: nil context",
		},
		{
			name:      "NewScopedOutgoingContext without a token",
			call:      func() error { fencing.NewScopedOutgoingContext(nilCtx, "", 0); return nil },
			wantPanic: "fencing: NewScopedOutgoingContext: nil context",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var panicked any
			err := func() error {
				defer func() { panicked = recover() }()
				return c.call()
			}()
			if c.wantPanic != "" {
				if msg := fmt.Sprint(panicked); panicked == nil || !strings.Contains(msg, c.wantPanic) {
					t.Fatalf("panicked with %v, want a panic saying %q", panicked, c.wantPanic)
				}
				return
			}
			if panicked != nil {
				t.Fatalf("panicked: %v", panicked)
			}
			if err == nil || !strings.Contains(err.Error(), "nil context") {
				t.Fatalf("error %v, want one saying nil context", err)
			}
			for _, want := range c.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			if errors.Is(err, fencing.ErrMalformedToken) {
				t.Errorf("error %v wraps ErrMalformedToken: nothing malformed was sent", err)
			}
		})
	}
}
