package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// HTTPMiddleware returns a handler that reads the token of every request
// from the fencing.HTTPHeader header, admits it with Admit and only then
// calls next, with r.WithContext(admitted context); done is called after
// next returns (also if it panics). A rejected request never reaches next;
// it gets a plain-text body that says why, and the status:
//
//   - 428 Precondition Required: no token header;
//   - 400 Bad Request: a malformed token, or several token values;
//   - 409 Conflict: a token below the mark (stale), including one that became
//     stale while it waited to be admitted, or a token the verifier says is
//     of no current grant (WithVerifier; fencing.ErrTokenForged): for an
//     honest client both mean that its grant is over;
//   - 503 Service Unavailable: the request's context ended while it waited
//     for requests with lower tokens to finish (the client went away or a
//     server timeout fired), or the store failed or did not answer within
//     the request's context or the store timeout (WithStore,
//     WithStoreTimeout), or the verifier could not tell whether the token
//     is of a current grant (ErrUnverified); the client may retry.
//
// The body of a 503 for a failure of the store or the verifier is the text
// of ErrStore or ErrUnverified alone: their own errors (a database
// driver's, a file system's, a coordination service's) may name the
// resource's hosts, tables or files, and go to the guard's logger
// (WithLogger) instead. Admit returns them whole.
//
// Given a nil next, every request gets 500 Internal Server Error saying so,
// and none is admitted.
func (g *Guard) HTTPMiddleware(next http.Handler) http.Handler {
	if next == nil {
		return noNext("Guard.HTTPMiddleware")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := fencing.FromHTTP(r)
		if err != nil {
			g.cfg.metrics.reject(err)
			http.Error(w, err.Error(), httpStatus(err))
			return
		}
		ctx, done, err := g.Admit(r.Context(), t)
		if err != nil {
			http.Error(w, g.cfg.told(err), httpStatus(err))
			return
		}
		defer done()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// noNext is the handler of a middleware given a nil next handler: it
// answers every request 500, with an error wrapping
// primitives.ErrInvalidArgument, and admits none, so that no mark moves for
// a request no handler serves.
func noNext(middleware string) http.Handler {
	err := fmt.Errorf("guard: %s: nil next handler: %w", middleware, primitives.ErrInvalidArgument)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	})
}

// told is what a rejected client is told of err: err's text, but for a
// failure of the store or the verifier only the text of ErrStore or
// ErrUnverified, for their errors may name the resource's hosts, tables
// or files. Such an err goes to the logger, whole, at a bounded rate (see
// outageLog).
func (c *config) told(err error) string {
	outage, failed, ok := outageOf(err)
	if !ok {
		return err.Error()
	}
	if c.logger != nil {
		c.outages[outage].reject(c.logger, err, time.Now())
	}
	return failed.Error()
}

// httpStatus is the status of a rejection: see HTTPMiddleware and
// Keyed.HTTPMiddleware. A failure of the store or the verifier comes
// first: the error it wraps (a corrupt stored mark, say) says nothing
// about the client's token.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrStore), errors.Is(err, ErrUnverified):
		return http.StatusServiceUnavailable
	case errors.Is(err, fencing.ErrTokenStale), errors.Is(err, fencing.ErrTokenForged):
		return http.StatusConflict
	case errors.Is(err, fencing.ErrWrongScope):
		return http.StatusForbidden
	case errors.Is(err, fencing.ErrMalformedToken):
		return http.StatusBadRequest
	case errors.Is(err, fencing.ErrNoToken):
		return http.StatusPreconditionRequired
	default: // the request's context ended while waiting
		return http.StatusServiceUnavailable
	}
}

// UnaryInterceptor returns a gRPC server interceptor that reads the token of
// every call from the fencing.GRPCMetadataKey metadata, admits it with Admit
// and only then calls the handler, with the admitted context; done is called
// after the handler returns. A rejected call never reaches the handler; its
// status is:
//
//   - codes.InvalidArgument: no token, a malformed token, or several values;
//   - codes.FailedPrecondition: a token below the mark (stale), or one the
//     verifier says is of no current grant (forged; WithVerifier);
//   - codes.Unavailable: the store failed, or did not answer within the
//     call's context or the store timeout (WithStore, WithStoreTimeout), or
//     the verifier could not tell (ErrUnverified);
//   - codes.Canceled or codes.DeadlineExceeded: the call's context ended while
//     it waited for calls with lower tokens to finish.
//
// The message of an Unavailable status for a failure of the store or the
// verifier is the text of ErrStore or ErrUnverified alone, as the body of
// HTTPMiddleware's 503 is.
func (g *Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		actx, done, err := g.admitGRPC(ctx)
		if err != nil {
			return nil, err
		}
		defer done()
		return handler(actx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streams: the token is read and
// the stream admitted once, when it starts; the handler sees the admitted
// context through the stream's Context method, and done is called after the
// handler returns. Rejections carry the codes UnaryInterceptor uses.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		actx, done, err := g.admitGRPC(ss.Context())
		if err != nil {
			return err
		}
		defer done()
		return handler(srv, &admittedStream{ServerStream: ss, ctx: actx})
	}
}

func (g *Guard) admitGRPC(ctx context.Context) (context.Context, func(), error) {
	t, err := fencing.FromIncomingContext(ctx)
	if err != nil {
		g.cfg.metrics.reject(err)
		return nil, noop, g.cfg.grpcError(err)
	}
	actx, done, err := g.Admit(ctx, t)
	if err != nil {
		return nil, noop, g.cfg.grpcError(err)
	}
	return actx, done, nil
}

// grpcError is the status of a rejection: see UnaryInterceptor and
// Keyed.UnaryInterceptor. Its message is told's.
func (c *config) grpcError(err error) error {
	code := codes.Canceled
	switch {
	case errors.Is(err, ErrStore), errors.Is(err, ErrUnverified): // first, as in httpStatus
		code = codes.Unavailable
	case errors.Is(err, fencing.ErrTokenStale), errors.Is(err, fencing.ErrTokenForged):
		code = codes.FailedPrecondition
	case errors.Is(err, fencing.ErrWrongScope):
		code = codes.PermissionDenied
	case errors.Is(err, fencing.ErrNoToken):
		code = codes.InvalidArgument
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, c.told(err))
}

// admittedStream is a grpc.ServerStream whose Context is the admitted one.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *admittedStream) Context() context.Context { return s.ctx }
