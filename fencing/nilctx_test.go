package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/ahrtr/disco/fencing"
)

// TestNilContext: a nil context is bad input, and never a panic. The
// readers of incoming metadata return an error that says so (wrapping
// ErrNoToken, or ErrNoScope, but not ErrMalformedToken: nothing malformed
// was sent); the makers of outgoing contexts, which have no error to
// return, take it for context.Background(), which has no deadline and no
// cancellation either, and stamp the token.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	for _, c := range []struct {
		name    string
		call    func() error
		wantErr []error // errors.Is must hold for each
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
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
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
	for _, c := range []struct {
		name  string
		make  func() context.Context
		token string // the outgoing token wanted; "" for none
		scope string
	}{
		{"NewOutgoingContext", func() context.Context { return fencing.NewOutgoingContext(nilCtx, 5) }, "5", ""},
		{"NewOutgoingContext without a token", func() context.Context { return fencing.NewOutgoingContext(nilCtx, 0) }, "", ""},
		{"NewScopedOutgoingContext", func() context.Context { return fencing.NewScopedOutgoingContext(nilCtx, "/a", 5) }, "5", "/a"},
		{"NewScopedOutgoingContext without a token", func() context.Context { return fencing.NewScopedOutgoingContext(nilCtx, "", 0) }, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := c.make()
			if ctx == nil {
				t.Fatal("returned a nil context")
			}
			if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
				t.Fatalf("the context has a deadline or can end; want context.Background()'s")
			}
			md, _ := metadata.FromOutgoingContext(ctx)
			if got := strings.Join(md.Get(fencing.GRPCMetadataKey), ","); got != c.token {
				t.Errorf("outgoing token %q, want %q", got, c.token)
			}
			if c.scope != "" && len(md.Get(fencing.ScopeGRPCMetadataKey)) != 1 {
				t.Errorf("outgoing scope %v, want one for %q", md.Get(fencing.ScopeGRPCMetadataKey), c.scope)
			}
		})
	}
}
