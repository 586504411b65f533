package guard

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/grpc"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/quote"
)

// wrongScope is the rejection of a token that names another scope than the
// one the request needs.
// Both are quoted by their start only if long (quote.Name): have is the
// client's header, as long as the server lets a header be, and the error
// goes into the response.
func wrongScope(need, have string) error {
	return fmt.Errorf("guard: this request needs a token of scope %s, got one of scope %s: %w", quote.Name(need), quote.Name(have), fencing.ErrWrongScope)
}

// HTTPMiddleware is Guard.HTTPMiddleware for many locks: scopeOf tells, from
// the request (typically its URL path), which scope the resource needs; the
// request must carry a token and a fencing.ScopeHTTPHeader naming exactly
// that scope, and is admitted with Admit on that scope's mark. A rejected
// request never reaches next; its status is Guard.HTTPMiddleware's, plus:
//
//   - 428 Precondition Required also when the request carries no scope, or
//     scopeOf returns "" (the resource named none);
//   - 400 Bad Request also for a malformed or repeated scope;
//   - 403 Forbidden: the token names another scope (fencing.ErrWrongScope).
//
// A nil scopeOf names no scope for any request (every request gets 428).
// Given a nil next, every request gets 500 Internal Server Error saying so,
// and none is admitted.
func (k *Keyed) HTTPMiddleware(scopeOf func(*http.Request) string, next http.Handler) http.Handler {
	if next == nil {
		return noNext("Keyed.HTTPMiddleware")
	}
	if scopeOf == nil {
		scopeOf = func(*http.Request) string { return "" }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, done, err := k.admitHTTP(scopeOf, r)
		if err != nil {
			http.Error(w, k.cfg.told(err), httpStatus(err))
			return
		}
		defer done()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (k *Keyed) admitHTTP(scopeOf func(*http.Request) string, r *http.Request) (context.Context, func(), error) {
	need := scopeOf(r)
	t, err := fencing.FromHTTP(r)
	if err == nil {
		err = k.matchScope(need, func() (string, error) { return fencing.ScopeFromHTTP(r) })
	}
	if err != nil {
		k.cfg.metrics.reject(err)
		return nil, noop, err
	}
	return k.Admit(r.Context(), need, t)
}

// matchScope checks that the scope a request carries (read by have) is the
// one it needs.
func (k *Keyed) matchScope(need string, have func() (string, error)) error {
	if err := validScope(need); err != nil {
		return err
	}
	got, err := have()
	if err != nil {
		return err
	}
	if got != need {
		return wrongScope(need, got)
	}
	return nil
}

// UnaryInterceptor is Guard.UnaryInterceptor for many locks: scopeOf tells,
// from the method and the request message, which scope the call needs; the
// call must carry a token and a fencing.ScopeGRPCMetadataKey naming exactly
// that scope. Codes are Guard.UnaryInterceptor's, plus InvalidArgument for a
// missing or malformed scope (or scopeOf returning "") and PermissionDenied
// for a token of another scope.
//
// A nil scopeOf names no scope for any call (every call gets
// InvalidArgument).
func (k *Keyed) UnaryInterceptor(scopeOf func(ctx context.Context, method string, req any) string) grpc.UnaryServerInterceptor {
	if scopeOf == nil {
		scopeOf = func(context.Context, string, any) string { return "" }
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		actx, done, err := k.admitGRPC(ctx, scopeOf(ctx, info.FullMethod, req))
		if err != nil {
			return nil, err
		}
		defer done()
		return handler(actx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streams: the scope is decided
// from the method alone, when the stream starts (no message has arrived
// yet), and the stream is admitted once.
// A nil scopeOf names no scope for any stream.
func (k *Keyed) StreamInterceptor(scopeOf func(ctx context.Context, method string) string) grpc.StreamServerInterceptor {
	if scopeOf == nil {
		scopeOf = func(context.Context, string) string { return "" }
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		actx, done, err := k.admitGRPC(ss.Context(), scopeOf(ss.Context(), info.FullMethod))
		if err != nil {
			return err
		}
		defer done()
		return handler(srv, &admittedStream{ServerStream: ss, ctx: actx})
	}
}

func (k *Keyed) admitGRPC(ctx context.Context, need string) (context.Context, func(), error) {
	t, err := fencing.FromIncomingContext(ctx)
	if err == nil {
		err = k.matchScope(need, func() (string, error) { return fencing.ScopeFromIncomingContext(ctx) })
	}
	if err != nil {
		k.cfg.metrics.reject(err)
		return nil, noop, k.cfg.grpcError(err)
	}
	actx, done, err := k.Admit(ctx, need, t)
	if err != nil {
		return nil, noop, k.cfg.grpcError(err)
	}
	return actx, done, nil
}
