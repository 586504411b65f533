// Package store is the gRPC resource of the lock examples: an in-memory
// implementation of the pb.KVServer key/value service, served behind a
// fencing guard's interceptors. Every method is fenced: a call without a
// token fails with codes.InvalidArgument, one with a token below the guard's
// mark with codes.FailedPrecondition.
//
// Both examples/lock/grpc/resource (a standalone server) and
// examples/lock/grpc/client (which starts one in-process when not given a
// -resource address) serve it.
package store

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// Store implements pb.KVServer in memory. A real resource persists its data
// and, atomically with it, the guard's mark, and restores the mark after a
// restart with guard.WithInitialMark. Otherwise a restart would forget every
// token it has seen and let a zombie in again.
type Store struct {
	mu   sync.Mutex
	data map[string]string
}

// New returns an empty store.
func New() *Store { return &Store{data: make(map[string]string)} }

// NewServer returns a gRPC server with a new Store registered behind g's
// unary and stream interceptors. logf, if not nil, is told about each call
// and how it ended, rejections by the guard included.
func NewServer(g *guard.Guard, logf func(format string, args ...any), opts ...grpc.ServerOption) *grpc.Server {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	opts = append([]grpc.ServerOption{
		grpc.ForceServerCodec(pb.Codec),
		// Logging runs first, so it sees the guard's answers too.
		grpc.ChainUnaryInterceptor(logUnary(g, logf), g.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(logStream(g, logf), g.StreamInterceptor()),
	}, opts...)
	srv := grpc.NewServer(opts...)
	pb.RegisterKVServer(srv, New())
	return srv
}

// Write stores a value. It runs only for admitted calls: the guard checked
// the token, and ctx is cancelled the moment a higher token asks to be
// admitted.
func (s *Store) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteReply, error) {
	return s.apply(ctx, req)
}

// Get returns a value.
func (s *Store) Get(_ context.Context, req *pb.GetRequest) (*pb.GetReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[req.Key]
	return &pb.GetReply{Value: v, Found: ok}, nil
}

// WriteStream applies the writes of one stream, all under the token the
// stream was admitted with, and confirms each.
func (s *Store) WriteStream(stream grpc.BidiStreamingServer[pb.WriteRequest, pb.WriteReply]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		reply, err := s.apply(stream.Context(), req)
		if err != nil {
			return err
		}
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

func (s *Store) apply(ctx context.Context, req *pb.WriteRequest) (*pb.WriteReply, error) {
	t, _ := fencing.FromIncomingContext(ctx) // already validated by the guard
	s.mu.Lock()
	defer s.mu.Unlock()
	// Superseded since admission? Then a higher token waits for this call to
	// finish, and this write must not happen: the guard's promise depends on it.
	if err := ctx.Err(); err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, fencing.ErrTokenStale) {
			return nil, status.Error(codes.FailedPrecondition, cause.Error())
		}
		return nil, status.FromContextError(err).Err()
	}
	s.data[req.Key] = req.Value
	return &pb.WriteReply{Key: req.Key, Token: int64(t)}, nil
}

func tokenOf(ctx context.Context) string {
	if t, err := fencing.FromIncomingContext(ctx); err == nil {
		return t.String()
	}
	return "none"
}

func logUnary(g *guard.Guard, logf func(string, ...any)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		logf("%s token=%s -> %s (mark %d)", info.FullMethod, tokenOf(ctx), status.Code(err), g.Mark())
		return resp, err
	}
}

func logStream(g *guard.Guard, logf func(string, ...any)) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		logf("%s token=%s -> %s (mark %d)", info.FullMethod, tokenOf(ss.Context()), status.Code(err), g.Mark())
		return err
	}
}
