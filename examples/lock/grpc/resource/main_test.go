package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the server's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestResource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, &out) }()

	cc, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(pb.CodecName)))
	if err != nil {
		t.Fatal(err)
	}
	kv := pb.NewKVClient(cc)
	write := func(tok fencing.Token, v string) codes.Code {
		_, err := kv.Write(fencing.NewOutgoingContext(context.Background(), tok), &pb.WriteRequest{Key: "doc", Value: v})
		return status.Code(err)
	}
	if c := write(7, "seven"); c != codes.OK {
		t.Errorf("Write token 7: %v, want OK", c)
	}
	if c := write(5, "five"); c != codes.FailedPrecondition {
		t.Errorf("Write token 5 after 7: %v, want FailedPrecondition", c)
	}
	if c := write(0, "none"); c != codes.InvalidArgument {
		t.Errorf("Write without token: %v, want InvalidArgument", c)
	}
	r, err := kv.Get(fencing.NewOutgoingContext(context.Background(), 7), &pb.GetRequest{Key: "doc"})
	if err != nil || r.Value != "seven" {
		t.Errorf("Get = %+v, %v; want seven", r, err)
	}
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{"Write token=7 -> OK", "Write token=5 -> FailedPrecondition", "Write token=none -> InvalidArgument", "stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, out.String())
		}
	}
}
