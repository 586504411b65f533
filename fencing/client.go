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

func current(src TokenSource) Token {
	if src == nil {
		return 0
	}
	return src()
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
	return &transport{base: base, src: src}
}

type transport struct {
	base http.RoundTripper
	src  TokenSource
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := current(tr.src)
	if t <= 0 {
		// A RoundTripper must close the body, even on errors.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &refusal{what: fmt.Sprintf("HTTP request %s %s", req.Method, redactedURL(req))}
	}
	out := req.Clone(req.Context())
	out.Header.Set(HTTPHeader, t.String())
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
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		t := current(src)
		if t <= 0 {
			return &refusal{what: "gRPC call " + method}
		}
		return invoker(NewOutgoingContext(ctx, t), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: it stamps
// each new stream with the token src returns when the stream is created, and
// refuses (FailedPrecondition, wrapping ErrNoToken) to create one without a
// token. The token is fixed for the life of the stream.
func StreamClientInterceptor(src TokenSource) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		t := current(src)
		if t <= 0 {
			return nil, &refusal{what: "gRPC stream " + method}
		}
		return streamer(NewOutgoingContext(ctx, t), desc, cc, method, opts...)
	}
}
