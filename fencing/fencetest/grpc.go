package fencetest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ahrtr/disco/fencing"
)

// GRPCAPI says how to write to and read from a gRPC resource: typically one
// call each of the service's generated client on conn. The kit has put the
// token (and on a Keyed resource its scope) into ctx's outgoing metadata
// (fencing.GRPCMetadataKey, fencing.ScopeGRPCMetadataKey).
type GRPCAPI struct {
	// Write makes the call that writes value in scope ("" on a resource
	// that is not Keyed) and returns its error: nil if the resource applied
	// the write. Codes are read as guard's interceptors send them:
	// FailedPrecondition is a stale token (fencing.ErrTokenStale),
	// PermissionDenied a token of another scope, InvalidArgument a missing
	// or malformed one; Unavailable, Canceled and DeadlineExceeded leave
	// the outcome unknown, and so do Unknown and Internal, as HTTP 500 does
	// through HTTPAPI (a handler's plain error is Unknown, a response that
	// failed to marshal or a broken stream Internal: either may come after
	// the write was applied); any other code is ErrRefused. A resource
	// that refuses a write for a reason of its own should answer one of
	// those (Aborted, ResourceExhausted), never Unknown or Internal, for
	// the kit to count it as refused.
	Write func(ctx context.Context, conn grpc.ClientConnInterface, scope, value string) error
	// Read makes the call that reads scope and returns the value, or "" if
	// nothing was written there.
	Read func(ctx context.Context, conn grpc.ClientConnInterface, scope string) (string, error)
}

// GRPCServer returns the Resource that the server start returns serves,
// in-process over an in-memory connection (package bufconn: real gRPC,
// interceptors and all, no network). start is called now, and again at each
// Restart after the previous server is stopped: it must build the server as
// a newly started process would (a new guard, its mark read from wherever
// the resource keeps it durably). If the resource keeps nothing across a
// restart, set the Resource's Restart to nil. opts are added to the client
// connection's options (for example grpc.WithDefaultCallOptions for a
// codec). The server and the connection are stopped when t ends.
func GRPCServer(t testing.TB, start func() *grpc.Server, api GRPCAPI, opts ...grpc.DialOption) Resource {
	t.Helper()
	s := &grpcServer{start: start, opts: opts}
	if err := s.up(); err != nil {
		t.Fatalf("fencetest: GRPCServer: %v", err)
	}
	t.Cleanup(s.down)
	r := grpcResource(api, s.conn)
	r.Restart = s.restart
	return r
}

// GRPCConn returns the Resource served by the server at the other end of
// conn. To check restarts, set the Resource's Restart to a function that
// restarts the server where conn reaches it.
func GRPCConn(conn grpc.ClientConnInterface, api GRPCAPI) Resource {
	return grpcResource(api, func() grpc.ClientConnInterface { return conn })
}

// grpcServer is GRPCServer's server, its listener and the kit's connection.
type grpcServer struct {
	start func() *grpc.Server
	opts  []grpc.DialOption

	mu     sync.RWMutex
	srv    *grpc.Server
	cc     *grpc.ClientConn
	served chan struct{} // closed when Serve returned
}

// bufSize is the buffer of the in-memory connection.
const bufSize = 1 << 20

func (s *grpcServer) up() error {
	lis := bufconn.Listen(bufSize)
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
	opts := append([]grpc.DialOption{
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, s.opts...)
	cc, err := grpc.NewClient("passthrough:///fencetest", opts...)
	if err != nil {
		return err
	}
	srv := s.start()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	s.mu.Lock()
	s.srv, s.cc, s.served = srv, cc, served
	s.mu.Unlock()
	return nil
}

func (s *grpcServer) down() {
	s.mu.Lock()
	srv, cc, served := s.srv, s.cc, s.served
	s.srv, s.cc = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	_ = cc.Close()
	srv.Stop() // a crash: no grace
	<-served
}

func (s *grpcServer) restart(context.Context) error {
	s.down()
	if err := s.up(); err != nil {
		return fmt.Errorf("fencetest: restarting the gRPC server: %w", err)
	}
	return nil
}

func (s *grpcServer) conn() grpc.ClientConnInterface {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cc
}

// grpcResource is the Resource of api on the connection conn returns.
func grpcResource(api GRPCAPI, conn func() grpc.ClientConnInterface) Resource {
	return Resource{
		Write: func(ctx context.Context, r Request) error {
			return grpcRefusal(api.Write(outgoing(ctx, r), conn(), r.Scope, r.Value))
		},
		Read: func(ctx context.Context, r Request) (string, error) {
			return api.Read(outgoing(ctx, r), conn(), r.Scope)
		},
	}
}

// outgoing returns ctx with the token metadata r says, raw: the kit sends
// malformed tokens too.
func outgoing(ctx context.Context, r Request) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy
	if !ok {
		md = metadata.MD{}
	}
	delete(md, fencing.GRPCMetadataKey)
	delete(md, fencing.ScopeGRPCMetadataKey)
	if r.Token != "" {
		md.Set(fencing.GRPCMetadataKey, r.Token)
	}
	if r.TokenScope != "" {
		md.Set(fencing.ScopeGRPCMetadataKey, fencing.EncodeScope(r.TokenScope))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// grpcRefusal is the error of a write call that returned err.
func grpcRefusal(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var reason error
	switch st.Code() {
	case codes.FailedPrecondition:
		reason = fencing.ErrTokenStale
	case codes.PermissionDenied:
		reason = fencing.ErrWrongScope
	case codes.InvalidArgument:
		reason = fencing.ErrNoToken
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return err // the call may or may not have reached the resource
	case codes.Unknown, codes.Internal:
		return err // the handler may have failed after applying the write
	default:
		reason = ErrRefused
	}
	return fmt.Errorf("%w: %w", err, reason)
}
