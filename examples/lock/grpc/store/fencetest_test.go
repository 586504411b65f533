package store

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing/fencetest"
	"github.com/ahrtr/disco/fencing/guard"
)

// api is how the kit reaches the KV service: Write and Get of key "doc".
// Get is fenced too; the kit reads with the token of its latest accepted
// write.
var api = fencetest.GRPCAPI{
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
}

// TestFences: the KV service behind the guard's interceptors passes the
// resource test kit. It keeps its data and its mark in memory only, so it
// declares no restart.
func TestFences(t *testing.T) {
	r := fencetest.GRPCServer(t, func() *grpc.Server { return NewServer(guard.New(), nil) }, api,
		grpc.WithDefaultCallOptions(grpc.ForceCodec(pb.Codec)))
	r.Restart = nil // data and mark live and die together, in memory
	fencetest.Run(t, r)
}
