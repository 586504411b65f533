package main

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing/fencetest"
)

// TestFences: the resource server, reached over gRPC at its address,
// passes the resource test kit. It persists nothing (see run), so it
// declares no restart.
func TestFences(t *testing.T) {
	addr, _, stop := storytest.Serve(t, run)
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(pb.Codec)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	fencetest.Run(t, fencetest.GRPCConn(cc, fencetest.GRPCAPI{
		Write: func(ctx context.Context, conn grpc.ClientConnInterface, _, value string) error {
			_, err := pb.NewKVClient(conn).Write(ctx, &pb.WriteRequest{Key: "doc", Value: value})
			return err
		},
		Read: func(ctx context.Context, conn grpc.ClientConnInterface, _ string) (string, error) {
			r, err := pb.NewKVClient(conn).Get(ctx, &pb.GetRequest{Key: "doc"})
			if err != nil {
				return "", err
			}
			return r.Value, nil
		},
	}))
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
