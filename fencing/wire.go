package fencing

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
)

// InjectHTTP sets the HTTPHeader of req to t, replacing any value it had.
// If t is not a valid token (t <= 0) it removes the header instead, so the
// request carries no token at all rather than a stale or bogus one; a guard
// then answers 428 Precondition Required. It modifies req in place; an
// http.RoundTripper must not, and should use NewTransport instead. A nil
// req is left as it is.
func InjectHTTP(req *http.Request, t Token) {
	if req == nil {
		return
	}
	if t <= 0 {
		setHeader(req.Header, HTTPHeader, "")
		return
	}
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	setHeader(req.Header, HTTPHeader, t.String())
}

// setHeader sets h's key to the one value v, or removes it for v == "",
// under every spelling of key h holds: a header map filled by hand (not
// through Header.Set) may hold a lower-cased one, and a request must not
// carry two tokens.
func setHeader(h http.Header, key, v string) {
	for k := range h {
		if k != key && strings.EqualFold(k, key) {
			delete(h, k)
		}
	}
	if v == "" {
		h.Del(key)
		return
	}
	h.Set(key, v)
}

// FromHTTP returns the token carried by req's HTTPHeader. A missing header
// (or a nil request) gives an error wrapping ErrNoToken only; a header given
// several times, a value holding a comma-separated list, or a value that
// ParseToken rejects gives an error wrapping ErrMalformedToken. A returned
// token is always greater than zero.
func FromHTTP(req *http.Request) (Token, error) {
	if req == nil {
		return 0, missing(HTTPHeader + " header (nil request)")
	}
	vs := req.Header.Values(HTTPHeader)
	return fromValues(vs, HTTPHeader+" header")
}

// ToGRPCMetadata returns metadata that carries t under GRPCMetadataKey. For
// t <= 0 it returns empty (non-nil) metadata: no token rather than a bogus
// one.
func ToGRPCMetadata(t Token) metadata.MD {
	if t <= 0 {
		return metadata.MD{}
	}
	return metadata.MD{GRPCMetadataKey: []string{t.String()}}
}

// FromGRPCMetadata returns the token carried by md under GRPCMetadataKey
// (looked up case-insensitively). The errors are those of FromHTTP: missing
// wraps ErrNoToken only; several values, a comma-separated list or a value
// ParseToken rejects wrap ErrMalformedToken.
func FromGRPCMetadata(md metadata.MD) (Token, error) {
	return fromValues(mdValues(md, GRPCMetadataKey), GRPCMetadataKey+" metadata")
}

// mdValues returns md's values under key (lower-case, as gRPC carries
// it) and under any other spelling of it, which a hand-built MD may hold.
func mdValues(md metadata.MD, key string) []string {
	vs := md.Get(key)
	for k, v := range md {
		if k != key && strings.EqualFold(k, key) {
			vs = append(vs[:len(vs):len(vs)], v...)
		}
	}
	return vs
}

// NewOutgoingContext returns a context whose outgoing gRPC metadata carries
// t under GRPCMetadataKey. It keeps every other key of ctx's outgoing
// metadata (including pairs added with metadata.AppendToOutgoingContext) and
// replaces, never appends to, any fencing token already there, so a request
// never carries two tokens. For t <= 0 the key is removed instead.
//
// A nil ctx, which has no error to return, is taken for
// context.Background(): like a nil one, it has no deadline and never ends.
// NewOutgoingContext never panics.
func NewOutgoingContext(ctx context.Context, t Token) context.Context {
	return withOutgoing(orBackground(ctx), t, nil)
}

// orBackground returns ctx, or context.Background() for a nil ctx (see
// NewOutgoingContext).
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// withOutgoing returns ctx with the token of its outgoing metadata set to t
// (removed for t <= 0) and then edit, if not nil, applied to the metadata.
// Without outgoing metadata and a token, ctx is returned as is.
func withOutgoing(ctx context.Context, t Token, edit func(metadata.MD)) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a fresh copy, keys lower-cased
	if !ok {
		if t <= 0 {
			return ctx
		}
		md = make(metadata.MD, 2)
	}
	if t <= 0 {
		delete(md, GRPCMetadataKey)
	} else {
		md[GRPCMetadataKey] = []string{t.String()}
	}
	if edit != nil {
		edit(md)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// FromIncomingContext returns the token carried by the incoming gRPC
// metadata of ctx, as a server handler or interceptor sees it. Errors are
// those of FromGRPCMetadata; a context without incoming metadata has no
// token. A nil ctx (a bug of the caller's: gRPC never passes one) has none
// either: an error that says "nil context" and wraps ErrNoToken only.
// (Package fencing cannot wrap primitives.ErrInvalidArgument: primitives
// imports fencing.)
func FromIncomingContext(ctx context.Context) (Token, error) {
	if ctx == nil {
		return 0, missing(GRPCMetadataKey + " metadata (nil context)")
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return 0, missing(GRPCMetadataKey + " metadata (no incoming metadata)")
	}
	return FromGRPCMetadata(md)
}

// fromValues parses the values of one header or metadata key, rejecting
// anything but exactly one value holding exactly one token.
func fromValues(vs []string, where string) (Token, error) {
	switch len(vs) {
	case 0:
		return 0, missing(where)
	case 1:
	default:
		return 0, malformed(strings.Join(vs, ", "), "several values")
	}
	return ParseToken(vs[0])
}
