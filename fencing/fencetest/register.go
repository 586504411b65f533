package fencetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ahrtr/disco/fencing"
)

// register is one scope of the resource as a history sees it: the writes it
// saw accepted there.
type register struct {
	t     testing.TB
	k     *kit
	ctx   context.Context
	scope string
	mark  fencing.Token // the highest token seen accepted in scope
	value string        // the value of the last write seen accepted
	// readAs is the token to read with before any write was accepted
	// (none if 0).
	readAs fencing.Token
}

// register returns the register of part of the current history (the one
// scope of an unkeyed resource).
func (k *kit) register(t testing.TB, ctx context.Context, part string) *register {
	return &register{t: t, k: k, ctx: ctx, scope: k.scope(t, part)}
}

// name is how messages call the register: its scope, or "the resource".
func (g *register) name() string {
	if g.scope == "" {
		return "the resource"
	}
	return fmt.Sprintf("scope %q", g.scope)
}

// grant returns a new token of the register's scope.
func (g *register) grant() fencing.Token {
	g.t.Helper()
	return g.k.grant(g.ctx, g.t, g.scope)
}

// send sends one write of value carrying the wire token tok and tokenScope,
// through res.
func (g *register) send(res *Resource, tok, tokenScope, value string) error {
	if tok != "" {
		g.k.fresh()
	}
	return res.Write(g.ctx, Request{Scope: g.scope, Token: tok, TokenScope: tokenScope, Value: value})
}

// write sends value with token t, its scope beside it, through res.
func (g *register) write(res *Resource, t fencing.Token, value string) error {
	return g.send(res, t.String(), g.scope, value)
}

// value returns the value a write of who with t stores: unique in the run.
func value(who string, t fencing.Token) string {
	return fmt.Sprintf("%s (token %d)", who, t)
}

// accept writes as who with t through res, and fails the history at once
// (saying why the write had to be accepted) if it is not.
func (g *register) accept(res *Resource, t fencing.Token, who, why string) {
	g.t.Helper()
	v := value(who, t)
	if err := g.write(res, t, v); err != nil {
		hint := ""
		if errors.Is(err, fencing.ErrTokenStale) && t > g.mark {
			hint = fmt.Sprintf(" (refused as stale, but token %d is above every token this run had sent to %s: was the resource fresh? An earlier run's mark stays in a kept database; see Resource.Grant)", t, g.name())
		}
		g.t.Fatalf("%s: the write of %s with token %d to %s was refused, but %s: %v%s",
			historyName(g.t), who, t, g.name(), why, err, hint)
	}
	g.mark = max(g.mark, t)
	g.value = v
}

// read returns what res holds in the register's scope, reading with the
// token of the latest accepted write.
func (g *register) read(res *Resource) string {
	g.t.Helper()
	tok := ""
	if m := max(g.mark, g.readAs); m > 0 {
		tok = m.String()
	}
	v, err := res.Read(g.ctx, Request{Scope: g.scope, Token: tok, TokenScope: g.scope})
	if err != nil {
		g.t.Fatalf("%s: reading %s: %v", historyName(g.t), g.name(), err)
	}
	return v
}

// holds reports an error unless res holds the value of the last accepted
// write; after says what just happened.
func (g *register) holds(res *Resource, after string) bool {
	g.t.Helper()
	got := g.read(res)
	if got == g.value {
		return true
	}
	want := fmt.Sprintf("%q", g.value)
	if g.value == "" {
		want = "nothing"
	}
	g.t.Errorf("%s: after %s, %s holds %q; want %s, the last write it accepted", historyName(g.t), after, g.name(), got, want)
	return false
}

// historyName is the name of the history t runs: the last element of its
// name.
func historyName(t testing.TB) string {
	n := t.Name()
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == '/' {
			return n[i+1:]
		}
	}
	return n
}
