package pb

import (
	"testing"

	"google.golang.org/grpc/encoding"
)

// Codec is a gRPC codec named for its content subtype.
var _ encoding.Codec = Codec

func TestJSONCodec(t *testing.T) {
	c := Codec
	if c.Name() != CodecName {
		t.Fatalf("codec named %q, want %q", c.Name(), CodecName)
	}
	b, err := c.Marshal(&WriteRequest{Key: "k", Value: "v"})
	if err != nil {
		t.Fatal(err)
	}
	var got WriteRequest
	if err := c.Unmarshal(b, &got); err != nil || got != (WriteRequest{Key: "k", Value: "v"}) {
		t.Fatalf("round trip of %s: %+v, %v", b, got, err)
	}
}
