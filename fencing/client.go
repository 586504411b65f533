package fencing

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TokenSource returns the token of the caller's current grant, or 0 (or any
// value <= 0) when it holds none. It is called once per outgoing request or
// stream, possibly from several goroutines at once, so it must be safe for
// concurrent use and cheap; typically it reads the token of the grant the
// caller last acquired and resets it to 0 on release or loss.
type TokenSource func() Token

// refusal is the error a client-side helper returns when its TokenSource
// has no token. It wraps ErrNoToken and, for gRPC callers, converts to a
// status with codes.FailedPrecondition: the caller is not in the state (holding
// a grant) that the call requires.
type refusal struct {
	what string
}

func (e *refusal) Error() string {
	return fmt.Sprintf("fencing: refusing to send %s without a token (no current grant): %v", e.what, ErrNoToken)
}

func (e *refusal) Unwrap() error { return ErrNoToken }

// GRPCStatus lets status.FromError and status.Code see a FailedPrecondition.
func (e *refusal) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// NewTransport returns an http.RoundTripper that stamps every request with
// the token src returns, in HTTPHeader (replacing any value the request
// already had), and then sends it through base (http.DefaultTransport when
// base is nil). It never modifies the caller's request: it sends a clone.
//
// When src returns a value <= 0 (or src is nil) the request is not sent at
// all: RoundTrip closes the request body and returns an error wrapping
// ErrNoToken (an http.Client wraps it further in a *url.Error;
// errors.Is still sees ErrNoToken). The returned RoundTripper forwards
// CloseIdleConnections to base when base supports it.
func NewTransport(base http.RoundTripper, src TokenSource) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, src: unscoped(src)}
}

// NewScopedTransport is NewTransport for scoped tokens: it stamps every
// request with the token and the scope src returns (HTTPHeader and
// ScopeHTTPHeader, replacing any values the request had; an empty scope
// removes ScopeHTTPHeader) and refuses, as NewTransport does, to send a
// request while src has no token.
func NewScopedTransport(base http.RoundTripper, src ScopedTokenSource) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, src: src, scoped: true}
}

// unscoped adapts a TokenSource to the scoped form; a nil source stays nil.
func unscoped(src TokenSource) ScopedTokenSource {
	if src == nil {
		return nil
	}
	return func() (string, Token) { return "", src() }
}

type transport struct {
	base   http.RoundTripper
	src    ScopedTokenSource
	scoped bool // stamp (or clear) ScopeHTTPHeader too
}

func currentScoped(src ScopedTokenSource) (string, Token) {
	if src == nil {
		return "", 0
	}
	return src()
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	scope, t := currentScoped(tr.src)
	if t <= 0 {
		// A RoundTripper must close the body, even on errors.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &refusal{what: fmt.Sprintf("HTTP request %s %s", req.Method, redactedURL(req))}
	}
	out := req.Clone(req.Context())
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	setHeader(out.Header, HTTPHeader, t.String())
	if tr.scoped {
		if scope == "" {
			setHeader(out.Header, ScopeHTTPHeader, "")
		} else {
			setHeader(out.Header, ScopeHTTPHeader, EncodeScope(scope))
		}
	}
	return tr.base.RoundTrip(out)
}

// CloseIdleConnections closes the idle connections of the base transport, if
// it keeps any.
func (tr *transport) CloseIdleConnections() {
	if c, ok := tr.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func redactedURL(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	return req.URL.Redacted()
}

// UnaryClientInterceptor returns a gRPC client interceptor that stamps every
// unary call with the token src returns, through NewOutgoingContext (which
// replaces any token already in the outgoing metadata). When src returns a
// value <= 0 (or src is nil) the call is not sent: the interceptor returns an
// error wrapping ErrNoToken, with gRPC status code FailedPrecondition, without
// invoking the next handler.
func UnaryClientInterceptor(src TokenSource) grpc.UnaryClientInterceptor {
	return unaryClient(unscoped(src), false)
}

// ScopedUnaryClientInterceptor is UnaryClientInterceptor for scoped tokens:
// it stamps the token and the scope src returns (NewScopedOutgoingContext)
// and refuses, with the same error, to send a call while src has no token.
func ScopedUnaryClientInterceptor(src ScopedTokenSource) grpc.UnaryClientInterceptor {
	return unaryClient(src, true)
}

func unaryClient(src ScopedTokenSource, scoped bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		scope, t := currentScoped(src)
		if t <= 0 {
			return &refusal{what: "gRPC call " + method}
		}
		return invoker(stamp(ctx, scoped, scope, t), method, req, reply, cc, opts...)
	}
}

func stamp(ctx context.Context, scoped bool, scope string, t Token) context.Context {
	if scoped {
		return NewScopedOutgoingContext(ctx, scope, t)
	}
	return NewOutgoingContext(ctx, t)
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: it stamps
// each new stream with the token src returns when the stream is created, and
// refuses (FailedPrecondition, wrapping ErrNoToken) to create one without a
// token. The token is fixed for the life of the stream.
func StreamClientInterceptor(src TokenSource) grpc.StreamClientInterceptor {
	return streamClient(unscoped(src), false)
}

// ScopedStreamClientInterceptor is StreamClientInterceptor for scoped
// tokens: token and scope are fixed when the stream is created.
func ScopedStreamClientInterceptor(src ScopedTokenSource) grpc.StreamClientInterceptor {
	return streamClient(src, true)
}

func streamClient(src ScopedTokenSource, scoped bool) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		scope, t := currentScoped(src)
		if t <= 0 {
			return nil, &refusal{what: "gRPC stream " + method}
		}
		return streamer(stamp(ctx, scoped, scope, t), desc, cc, method, opts...)
	}
}
