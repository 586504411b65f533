package fencing_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/ahrtr/disco/fencing"
)

// checkResult asserts the properties every token parser must have: a token
// it returns is valid and in canonical form, and every error wraps
// ErrNoToken.
func checkResult(t *testing.T, in string, tok fencing.Token, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, fencing.ErrNoToken) {
			t.Fatalf("input %q: error %v does not wrap ErrNoToken", in, err)
		}
		if tok != 0 {
			t.Fatalf("input %q: token %d returned with error", in, tok)
		}
		return
	}
	if tok <= 0 {
		t.Fatalf("input %q: accepted token %d <= 0", in, tok)
	}
	back, err := fencing.ParseToken(tok.String())
	if err != nil || back != tok {
		t.Fatalf("input %q: ParseToken(%q) = %d, %v", in, tok.String(), back, err)
	}
}

var seeds = []string{
	"1", "42", "9223372036854775807", "9223372036854775808", "0", "00", "007",
	"", " ", "+1", "-1", " 1", "1 ", "1,2", "12a", "0x1f", "1_0", "\u0661", "１",
	"99999999999999999999", "18446744073709551615",
}

func FuzzParseToken(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencing.ParseToken(s)
		checkResult(t, s, tok, err)
		if err == nil && tok.String() != s {
			t.Fatalf("accepted non-canonical %q (canonical %q)", s, tok.String())
		}
		if err != nil && !errors.Is(err, fencing.ErrMalformedToken) {
			t.Fatalf("input %q: error %v does not wrap ErrMalformedToken", s, err)
		}
	})
}

func FuzzFromHTTP(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, "")
		f.Add(s, "5")
	}
	f.Add("3", "3")
	f.Fuzz(func(t *testing.T, first, second string) {
		for _, vs := range [][]string{{first}, {first, second}} {
			req := &http.Request{Header: http.Header{fencing.HTTPHeader: vs}}
			tok, err := fencing.FromHTTP(req)
			checkResult(t, strings.Join(vs, "|"), tok, err)
			if len(vs) == 2 && err == nil {
				t.Fatalf("accepted two header values %q", vs)
			}
			if err == nil && tok.String() != vs[0] {
				t.Fatalf("accepted non-canonical %q", vs[0])
			}
		}
	})
}

func FuzzFromGRPCMetadata(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, "", false)
		f.Add(s, "7", true)
	}
	f.Fuzz(func(t *testing.T, first, second string, two bool) {
		md := metadata.Pairs(fencing.GRPCMetadataKey, first)
		if two {
			md.Append(fencing.GRPCMetadataKey, second)
		}
		tok, err := fencing.FromGRPCMetadata(md)
		checkResult(t, first+"|"+second, tok, err)
		if two && err == nil {
			t.Fatalf("accepted two metadata values %q, %q", first, second)
		}
		if err == nil && tok.String() != first {
			t.Fatalf("accepted non-canonical %q", first)
		}
	})
}
