package main

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResource(t *testing.T) {
	addr, log, stop := storytest.Serve(t, run)

	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(pb.Codec)))
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

	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	storytest.Mentions(t, "log", log.String(), "Write token=7 -> OK", "Write token=5 -> FailedPrecondition", "Write token=none -> InvalidArgument", "stopped")
}
