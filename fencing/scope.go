package fencing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
)

// A scope names the grant a token belongs to: the name (prefix) of the lock,
// rwlock or election that issued it, exactly as its user passed it to the
// primitive's constructor. Tokens of different scopes are not comparable for
// fencing purposes, so a resource that guards many locks keeps one mark per
// scope (guard.Keyed) and rejects a token that names another scope than the
// one a request needs.
//
// On the wire the scope travels beside the token, in ScopeHTTPHeader or
// ScopeGRPCMetadataKey. Bytes that a header or metadata value cannot carry
// (controls, space, non-ASCII) and '%' itself are percent-encoded as %XX
// (upper-case hex); every other byte is sent as is, so a typical prefix such
// as "/locks/orders/42" appears on the wire unchanged.
const (
	// ScopeHTTPHeader is the HTTP header that carries a token's scope.
	ScopeHTTPHeader = "Fencing-Scope"
	// ScopeGRPCMetadataKey is the gRPC metadata key that carries a token's
	// scope.
	ScopeGRPCMetadataKey = "fencing-scope"
)

var (
	// ErrNoScope means a request carries no scope where one is needed (a
	// keyed guard). It wraps ErrNoToken: a token without a scope is, for a
	// keyed guard, no usable token, and the guard answers as for a missing
	// token (HTTP 428, gRPC InvalidArgument).
	ErrNoScope = fmt.Errorf("fencing: no scope: %w", ErrNoToken)

	// ErrMalformedScope means a scope value is present but cannot be decoded
	// (a bad %-escape) or is given several times. It wraps ErrMalformedToken.
	ErrMalformedScope = fmt.Errorf("fencing: malformed scope: %w", ErrMalformedToken)

	// ErrWrongScope means a token names another scope than the one the
	// request needs: it was issued for a different lock. A keyed guard
	// answers HTTP 403 Forbidden or gRPC PermissionDenied.
	ErrWrongScope = errors.New("fencing: token of another scope")
)

// ScopedTokenSource is TokenSource for scoped tokens: it returns the scope
// and the token of the caller's current grant, or a token <= 0 when it
// holds none. The rules of TokenSource apply (safe for concurrent use,
// cheap). An empty scope with a valid token stamps the token alone, as an
// unscoped TokenSource would.
type ScopedTokenSource func() (scope string, t Token)

// EncodeScope returns scope in its wire form (see ScopeHTTPHeader).
func EncodeScope(scope string) string {
	n := 0
	for i := 0; i < len(scope); i++ {
		if needsEscape(scope[i]) {
			n++
		}
	}
	if n == 0 {
		return scope
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(scope) + 2*n)
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '%' }

// DecodeScope parses the wire form of a scope. Errors wrap
// ErrMalformedScope: a '%' not followed by two hex digits, or a byte that
// EncodeScope would have escaped. The empty string decodes to "".
func DecodeScope(s string) (string, error) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return "", scopeMalformed(s, "bad %-escape")
			}
			n++
			i += 2
			continue
		}
		if needsEscape(c) {
			return "", scopeMalformed(s, "byte that must be %-escaped")
		}
	}
	if n == 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s)-2*n)
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

func scopeMalformed(s, reason string) error {
	s = clip(s)
	return fmt.Errorf("fencing: malformed scope %q: %s: %w", s, reason, ErrMalformedScope)
}

// scopeFromValues parses the values of one scope header or metadata key.
func scopeFromValues(vs []string, where string) (string, error) {
	switch len(vs) {
	case 0:
		return "", fmt.Errorf("fencing: missing %s: %w", where, ErrNoScope)
	case 1:
	default:
		return "", scopeMalformed(strings.Join(vs, ", "), "several values")
	}
	if vs[0] == "" {
		return "", fmt.Errorf("fencing: empty %s: %w", where, ErrNoScope)
	}
	return DecodeScope(vs[0])
}

// InjectScopedHTTP sets the token and scope headers of req (InjectHTTP for
// the token). A token <= 0 removes both headers; an empty scope removes the
// scope header and leaves a plain, unscoped token. A nil req is left as
// it is.
func InjectScopedHTTP(req *http.Request, scope string, t Token) {
	if req == nil {
		return
	}
	InjectHTTP(req, t)
	if t <= 0 || scope == "" {
		setHeader(req.Header, ScopeHTTPHeader, "")
		return
	}
	setHeader(req.Header, ScopeHTTPHeader, EncodeScope(scope))
}

// ScopeFromHTTP returns the scope carried by req's ScopeHTTPHeader, decoded.
// A missing or empty header (or a nil request) gives an error wrapping
// ErrNoScope; several values or a bad encoding an error wrapping
// ErrMalformedScope.
func ScopeFromHTTP(req *http.Request) (string, error) {
	if req == nil {
		return "", fmt.Errorf("fencing: missing %s header (nil request): %w", ScopeHTTPHeader, ErrNoScope)
	}
	return scopeFromValues(req.Header.Values(ScopeHTTPHeader), ScopeHTTPHeader+" header")
}

// ToScopedGRPCMetadata is ToGRPCMetadata plus the scope under
// ScopeGRPCMetadataKey (omitted when scope is empty or t <= 0).
func ToScopedGRPCMetadata(scope string, t Token) metadata.MD {
	md := ToGRPCMetadata(t)
	if t > 0 && scope != "" {
		md[ScopeGRPCMetadataKey] = []string{EncodeScope(scope)}
	}
	return md
}

// ScopeFromGRPCMetadata returns the scope carried by md under
// ScopeGRPCMetadataKey (looked up case-insensitively); errors as
// ScopeFromHTTP.
func ScopeFromGRPCMetadata(md metadata.MD) (string, error) {
	return scopeFromValues(mdValues(md, ScopeGRPCMetadataKey), ScopeGRPCMetadataKey+" metadata")
}

// ScopeFromIncomingContext returns the scope carried by the incoming gRPC
// metadata of ctx; errors as ScopeFromGRPCMetadata. A nil ctx gives an
// error that says "nil context" and wraps ErrNoScope, as FromIncomingContext.
func ScopeFromIncomingContext(ctx context.Context) (string, error) {
	if ctx == nil {
		return "", fmt.Errorf("fencing: missing %s metadata (nil context): %w", ScopeGRPCMetadataKey, ErrNoScope)
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", fmt.Errorf("fencing: missing %s metadata (no incoming metadata): %w", ScopeGRPCMetadataKey, ErrNoScope)
	}
	return ScopeFromGRPCMetadata(md)
}

// NewScopedOutgoingContext is NewOutgoingContext that also sets (or, for an
// empty scope or t <= 0, removes) the scope key, replacing any scope already
// in ctx's outgoing metadata. A nil ctx is taken for context.Background(),
// as in NewOutgoingContext.
func NewScopedOutgoingContext(ctx context.Context, scope string, t Token) context.Context {
	return withOutgoing(orBackground(ctx), t, func(md metadata.MD) {
		if t <= 0 || scope == "" {
			delete(md, ScopeGRPCMetadataKey)
		} else {
			md[ScopeGRPCMetadataKey] = []string{EncodeScope(scope)}
		}
	})
}
