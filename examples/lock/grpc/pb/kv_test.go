package pb

import (
	"testing"

	"google.golang.org/grpc/encoding"
)

func TestJSONCodec(t *testing.T) {
	c := encoding.GetCodec(CodecName)
	if c == nil {
		t.Fatalf("no codec registered under %q", CodecName)
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
