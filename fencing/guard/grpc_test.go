package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// jsonCodec lets the test define a gRPC service by hand, without protoc.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// msg is the one message type of the test service.
type msg struct {
	// Hold asks the handler to wait until its context ends.
	Hold bool `json:"hold,omitempty"`
	// Cause is the handler's context cause after a hold.
	Cause string `json:"cause,omitempty"`
	// Stale reports errors.Is(cause, fencing.ErrTokenStale).
	Stale bool `json:"stale,omitempty"`
}

type service struct {
	calls   atomic.Int64
	started chan struct{} // receives when a holding handler has started
}

// serve runs one handler body for both the unary and the stream method.
func (s *service) serve(ctx context.Context, in *msg) *msg {
	s.calls.Add(1)
	out := &msg{}
	if in.Hold {
		s.started <- struct{}{}
		select {
		case <-ctx.Done():
			c := context.Cause(ctx)
			out.Cause, out.Stale = c.Error(), errors.Is(c, fencing.ErrTokenStale)
		case <-time.After(patience):
			out.Cause = "handler context never cancelled"
		}
	}
	return out
}

const (
	serviceName = "disco.test.Fenced"
	unaryMethod = "/" + serviceName + "/Do"
	streamName  = "Watch"
	streamMeth  = "/" + serviceName + "/" + streamName
)

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(msg)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*service).serve(ctx, req.(*msg)), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: unaryMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    streamName,
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(msg)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return stream.SendMsg(srv.(*service).serve(stream.Context(), in))
		},
	}},
}

var watchDesc = grpc.StreamDesc{StreamName: streamName, ServerStreams: true}

type grpcFixture struct {
	g   *guard.Guard
	svc *service
	lis *bufconn.Listener
}

func newGRPCFixture(t *testing.T, g *guard.Guard) *grpcFixture {
	t.Helper()
	f := &grpcFixture{g: g, svc: &service{started: make(chan struct{}, 1)}, lis: bufconn.Listen(1 << 20)}
	srv := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryInterceptor()), grpc.StreamInterceptor(g.StreamInterceptor()))
	srv.RegisterService(&serviceDesc, f.svc)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Serve(f.lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return f
}

// conn returns a client connection; src, if not nil, installs the fencing
// client interceptors.
func (f *grpcFixture) conn(t *testing.T, src fencing.TokenSource) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return f.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(jsonCodec{}.Name())),
	}
	if src != nil {
		opts = append(opts,
			grpc.WithUnaryInterceptor(fencing.UnaryClientInterceptor(src)),
			grpc.WithStreamInterceptor(fencing.StreamClientInterceptor(src)))
	}
	cc, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func callUnary(ctx context.Context, cc *grpc.ClientConn, in *msg) (*msg, error) {
	out := new(msg)
	err := cc.Invoke(ctx, unaryMethod, in, out)
	return out, err
}

func callStream(ctx context.Context, cc *grpc.ClientConn, in *msg) (*msg, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc.NewStream(ctx, &watchDesc, streamMeth)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(in); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	out := new(msg)
	if err := st.RecvMsg(out); err != nil {
		return nil, err
	}
	return out, nil
}

type caller func(context.Context, *grpc.ClientConn, *msg) (*msg, error)

var callers = map[string]caller{"unary": callUnary, "stream": callStream}

// withToken returns a bounded context whose outgoing metadata carries the
// given token values, exactly as given.
func withToken(t *testing.T, values ...string) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	t.Cleanup(cancel)
	for _, v := range values {
		ctx = metadata.AppendToOutgoingContext(ctx, fencing.GRPCMetadataKey, v)
	}
	return ctx
}

func TestGRPCInterceptors(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			g := guard.New(guard.WithInitialMark(10))
			f := newGRPCFixture(t, g)
			plain := f.conn(t, nil)
			cases := []struct {
				name   string
				values []string
				code   codes.Code
				msg    string
			}{
				{"accepted", []string{"10"}, codes.OK, ""},
				{"higher", []string{"12"}, codes.OK, ""},
				{"stale", []string{"11"}, codes.FailedPrecondition, "token 11 is below the mark 12"},
				{"missing", nil, codes.InvalidArgument, "missing"},
				{"malformed", []string{"12a"}, codes.InvalidArgument, "not a decimal number"},
				{"zero", []string{"0"}, codes.InvalidArgument, "zero"},
				{"two values", []string{"13", "13"}, codes.InvalidArgument, "several values"},
			}
			for _, c := range cases {
				before := f.svc.calls.Load()
				_, err := call(withToken(t, c.values...), plain, &msg{})
				if got := status.Code(err); got != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
					t.Errorf("%s: got %v, want %v containing %q", c.name, err, c.code, c.msg)
				}
				if ran := f.svc.calls.Load() != before; ran != (c.code == codes.OK) {
					t.Errorf("%s: handler ran = %t", c.name, ran)
				}
			}
			if g.Mark() != 12 {
				t.Fatalf("mark = %d, want 12", g.Mark())
			}
			// done ran after each handler: a higher token gets in at once.
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			_, done, err := g.Admit(ctx, 20)
			if err != nil {
				t.Fatalf("Admit after gRPC calls: %v", err)
			}
			done()
		})
	}
}

func TestGRPCClientInterceptors(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			g := guard.New()
			f := newGRPCFixture(t, g)
			var tok atomic.Int64
			cc := f.conn(t, func() fencing.Token { return fencing.Token(tok.Load()) })

			// No grant: refused locally, the server never sees the call.
			_, err := call(withToken(t), cc, &msg{})
			if !errors.Is(err, fencing.ErrNoToken) || status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("without a token: %v, want a local ErrNoToken refusal", err)
			}
			if f.svc.calls.Load() != 0 || g.Mark() != 0 {
				t.Fatal("the server saw a call without a token")
			}

			// With a grant the token is stamped, replacing a stale one the
			// caller put in the metadata by hand.
			tok.Store(7)
			if _, err := call(withToken(t, "3"), cc, &msg{}); err != nil {
				t.Fatalf("with token 7: %v", err)
			}
			if g.Mark() != 7 || f.svc.calls.Load() != 1 {
				t.Fatalf("mark %d, calls %d; want 7, 1", g.Mark(), f.svc.calls.Load())
			}

			// A newer grant elsewhere makes this one stale at the server.
			if err := g.Check(9); err != nil {
				t.Fatal(err)
			}
			_, err = call(withToken(t), cc, &msg{})
			if status.Code(err) != codes.FailedPrecondition || errors.Is(err, fencing.ErrNoToken) {
				t.Fatalf("stale token: %v, want a server-side FailedPrecondition", err)
			}
		})
	}
}

func TestGRPCHandlerGetsAdmittedContext(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			g := guard.New()
			f := newGRPCFixture(t, g)
			cc := f.conn(t, func() fencing.Token { return 5 })
			type result struct {
				out *msg
				err error
			}
			res := make(chan result, 1)
			go func() {
				out, err := call(withToken(t), cc, &msg{Hold: true})
				res <- result{out, err}
			}()
			recv(t, f.svc.started, "handler start")
			if err := g.Check(6); err != nil {
				t.Fatal(err)
			}
			r := recv(t, res, "handler return")
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !r.out.Stale || !strings.Contains(r.out.Cause, "superseded by token 6") {
				t.Fatalf("handler context cause %q (stale %t), want superseded", r.out.Cause, r.out.Stale)
			}
		})
	}
}

func TestGRPCWaitEnds(t *testing.T) {
	g := guard.New()
	low, lowDone := admit(t, g, 5)
	defer lowDone()
	icpt := g.UnaryInterceptor()
	handler := func(context.Context, any) (any, error) {
		t.Error("handler called")
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(metadata.NewIncomingContext(context.Background(), fencing.ToGRPCMetadata(6)), 20*time.Millisecond)
	defer cancel()
	_, err := icpt(ctx, &msg{}, &grpc.UnaryServerInfo{FullMethod: unaryMethod}, handler)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	mustStale(t, low, "token 5")

	ctx, cancel = context.WithCancel(metadata.NewIncomingContext(context.Background(), fencing.ToGRPCMetadata(7)))
	cancel()
	_, err = icpt(ctx, &msg{}, &grpc.UnaryServerInfo{FullMethod: unaryMethod}, handler)
	if status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want Canceled", err)
	}
}
