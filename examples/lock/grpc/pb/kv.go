// Package pb defines the gRPC service of the lock examples by hand, without
// protoc: plain Go structs for the messages, a JSON codec (Codec, content
// subtype "json"), and a hand-written grpc.ServiceDesc.
//
// The service is a tiny key/value store, disco.examples.lock.KV:
//
//	Write(WriteRequest) returns (WriteReply)                       unary
//	Get(GetRequest) returns (GetReply)                             unary
//	WriteStream(stream WriteRequest) returns (stream WriteReply)   bidi streaming
//
// Both ends name the codec explicitly (nothing is registered globally):
//
//	grpc.NewServer(grpc.ForceServerCodec(pb.Codec))
//	grpc.NewClient(addr, grpc.WithDefaultCallOptions(grpc.ForceCodec(pb.Codec)))
package pb

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
)

// CodecName is the content subtype of the JSON codec: requests travel as
// "application/grpc+json".
const CodecName = "json"

// Codec marshals the messages with encoding/json.
var Codec jsonCodec

// jsonCodec is an encoding.Codec that marshals messages with encoding/json.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return CodecName }

// WriteRequest stores Value under Key.
type WriteRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// WriteReply confirms a write and names the fencing token that admitted it.
type WriteReply struct {
	Key   string `json:"key"`
	Token int64  `json:"token"`
}

// GetRequest asks for the value of Key.
type GetRequest struct {
	Key string `json:"key"`
}

// GetReply is the value of a key; Found is false if the key was never written.
type GetReply struct {
	Value string `json:"value"`
	Found bool   `json:"found"`
}

// Service and method names.
const (
	ServiceName       = "disco.examples.lock.KV"
	WriteMethod       = "/" + ServiceName + "/Write"
	GetMethod         = "/" + ServiceName + "/Get"
	WriteStreamMethod = "/" + ServiceName + "/WriteStream"
)

// KVServer is the server side of the service.
type KVServer interface {
	Write(context.Context, *WriteRequest) (*WriteReply, error)
	Get(context.Context, *GetRequest) (*GetReply, error)
	// WriteStream applies each request it receives and answers each with a
	// WriteReply, in order.
	WriteStream(grpc.BidiStreamingServer[WriteRequest, WriteReply]) error
}

// RegisterKVServer registers srv with s.
func RegisterKVServer(s grpc.ServiceRegistrar, srv KVServer) {
	s.RegisterService(&ServiceDesc, srv)
}

// ServiceDesc describes the service to gRPC, as protoc-gen-go-grpc would.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*KVServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Write", Handler: writeHandler},
		{MethodName: "Get", Handler: getHandler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "WriteStream", Handler: writeStreamHandler, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "examples/lock/grpc/pb/kv.go",
}

// unary decodes a request of type Req and calls call through interceptor,
// if there is one: the shape of every protoc-generated unary handler.
func unary[Req any](method string, call func(KVServer, context.Context, *Req) (any, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(srv.(KVServer), ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return call(srv.(KVServer), ctx, req.(*Req))
		})
	}
}

var (
	writeHandler = unary(WriteMethod, func(s KVServer, ctx context.Context, in *WriteRequest) (any, error) {
		return s.Write(ctx, in)
	})
	getHandler = unary(GetMethod, func(s KVServer, ctx context.Context, in *GetRequest) (any, error) {
		return s.Get(ctx, in)
	})
)

func writeStreamHandler(srv any, stream grpc.ServerStream) error {
	return srv.(KVServer).WriteStream(&grpc.GenericServerStream[WriteRequest, WriteReply]{ServerStream: stream})
}

// KVClient is the client side of the service.
type KVClient struct {
	cc grpc.ClientConnInterface
}

// NewKVClient returns a client that calls the service over cc.
func NewKVClient(cc grpc.ClientConnInterface) *KVClient { return &KVClient{cc: cc} }

// Write calls Write.
func (c *KVClient) Write(ctx context.Context, in *WriteRequest, opts ...grpc.CallOption) (*WriteReply, error) {
	out := new(WriteReply)
	if err := c.cc.Invoke(ctx, WriteMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Get calls Get.
func (c *KVClient) Get(ctx context.Context, in *GetRequest, opts ...grpc.CallOption) (*GetReply, error) {
	out := new(GetReply)
	if err := c.cc.Invoke(ctx, GetMethod, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// WriteStream opens a WriteStream. The caller ends it with CloseSend and
// reads replies until Recv returns io.EOF (or an error), or cancels ctx.
func (c *KVClient) WriteStream(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[WriteRequest, WriteReply], error) {
	st, err := c.cc.NewStream(ctx, &ServiceDesc.Streams[0], WriteStreamMethod, opts...)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[WriteRequest, WriteReply]{ClientStream: st}, nil
}
