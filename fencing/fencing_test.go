package fencing_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"

	"github.com/ahrtr/disco/fencing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTokenStringAndParseRoundTrip(t *testing.T) {
	cases := []fencing.Token{1, 9, 10, 42, 100, 1 << 31, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		cases = append(cases, fencing.Token(r.Int64N(math.MaxInt64)+1))
	}
	for _, tok := range cases {
		s := tok.String()
		got, err := fencing.ParseToken(s)
		if err != nil {
			t.Fatalf("ParseToken(%q): %v", s, err)
		}
		if got != tok {
			t.Fatalf("ParseToken(%q) = %d, want %d", s, got, tok)
		}
	}
	if got := fencing.Token(1234567).String(); got != "1234567" {
		t.Fatalf("String() = %q, want 1234567", got)
	}
	if got := fencing.Token(0).String(); got != "0" {
		t.Fatalf("Token(0).String() = %q, want 0", got)
	}
}

func TestParseTokenMalformed(t *testing.T) {
	cases := []struct {
		in, reason string
	}{
		{"", "empty"},
		{"+1", "sign not allowed"},
		{"-1", "sign not allowed"},
		{"-0", "sign not allowed"},
		{"+", "sign not allowed"},
		{" 1", "whitespace not allowed"},
		{"1 ", "whitespace not allowed"},
		{"1 2", "whitespace not allowed"},
		{"\t1", "whitespace not allowed"},
		{"1\n", "whitespace not allowed"},
		{"12a", "not a decimal number"},
		{"abc", "not a decimal number"},
		{"0x10", "not a decimal number"},
		{"1_000", "not a decimal number"},
		{"1.5", "not a decimal number"},
		{"1e3", "not a decimal number"},
		{"1-", "not a decimal number"},
		{"\uff11", "not a decimal number"}, // fullwidth digit one
		{"1,2", "several values"},
		{"9223372036854775808", "out of range"},
		{"18446744073709551616", "out of range"},
		{"99999999999999999999999999", "out of range"},
		{"99999999999999999999x", "not a decimal number"},
		{"0", "zero"},
		{"00", "zero"},
		{"007", "leading zero"},
		{"09223372036854775807", "leading zero"},
	}
	for _, c := range cases {
		tok, err := fencing.ParseToken(c.in)
		if err == nil {
			t.Errorf("ParseToken(%q) = %d, nil; want an error", c.in, tok)
			continue
		}
		if tok != 0 {
			t.Errorf("ParseToken(%q) returned token %d with error", c.in, tok)
		}
		if !errors.Is(err, fencing.ErrNoToken) || !errors.Is(err, fencing.ErrMalformedToken) {
			t.Errorf("ParseToken(%q) error %v does not wrap ErrNoToken and ErrMalformedToken", c.in, err)
		}
		if errors.Is(err, fencing.ErrTokenStale) {
			t.Errorf("ParseToken(%q) error %v wraps ErrTokenStale", c.in, err)
		}
		if !strings.Contains(err.Error(), c.reason) {
			t.Errorf("ParseToken(%q) error %q does not say %q", c.in, err, c.reason)
		}
	}
	_, err := fencing.ParseToken("12a")
	if want := `fencing: malformed token "12a": not a decimal number: fencing: no token`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestParseTokenLongInputIsTruncatedInError(t *testing.T) {
	in := strings.Repeat("x", 10000)
	_, err := fencing.ParseToken(in)
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error for a 10000-byte input is %d bytes long: %v", len(err.Error()), err)
	}
}

func TestErrorSentinels(t *testing.T) {
	if !errors.Is(fencing.ErrMalformedToken, fencing.ErrNoToken) {
		t.Fatal("ErrMalformedToken does not wrap ErrNoToken")
	}
	if errors.Is(fencing.ErrNoToken, fencing.ErrMalformedToken) {
		t.Fatal("ErrNoToken wraps ErrMalformedToken")
	}
	if errors.Is(fencing.ErrTokenStale, fencing.ErrNoToken) || errors.Is(fencing.ErrNoToken, fencing.ErrTokenStale) {
		t.Fatal("ErrTokenStale and ErrNoToken are related")
	}
}

// isMissing and isMalformed are how a server tells 428 from 400.
func isMissing(err error) bool {
	return errors.Is(err, fencing.ErrNoToken) && !errors.Is(err, fencing.ErrMalformedToken)
}

func isMalformed(err error) bool { return errors.Is(err, fencing.ErrMalformedToken) }

func newRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://example.invalid/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestFromHTTP(t *testing.T) {
	req := newRequest(t)
	_, err := fencing.FromHTTP(req)
	if !isMissing(err) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("no header: error %v, want missing", err)
	}
	if _, err := fencing.FromHTTP(nil); !isMissing(err) {
		t.Fatalf("nil request: error %v, want missing", err)
	}

	req.Header.Set(fencing.HTTPHeader, "17")
	if tok, err := fencing.FromHTTP(req); err != nil || tok != 17 {
		t.Fatalf("FromHTTP = %d, %v; want 17", tok, err)
	}

	malformed := map[string][]string{
		"two headers": {"17", "18"},
		"same twice":  {"17", "17"},
		"comma list":  {"17,18"},
		"comma space": {"17, 18"},
		"empty value": {""},
		"letters":     {"x"},
		"zero":        {"0"},
		"negative":    {"-5"},
		"overflow":    {"9223372036854775808"},
	}
	for name, vs := range malformed {
		req := newRequest(t)
		for _, v := range vs {
			req.Header.Add(fencing.HTTPHeader, v)
		}
		tok, err := fencing.FromHTTP(req)
		if err == nil {
			t.Errorf("%s: FromHTTP = %d, nil; want malformed", name, tok)
			continue
		}
		if !isMalformed(err) || !errors.Is(err, fencing.ErrNoToken) {
			t.Errorf("%s: error %v, want malformed", name, err)
		}
	}
	req = newRequest(t)
	req.Header.Add(fencing.HTTPHeader, "1")
	req.Header.Add(fencing.HTTPHeader, "2")
	if _, err := fencing.FromHTTP(req); err == nil || !strings.Contains(err.Error(), "several values") {
		t.Fatalf("two headers: error %v does not say several values", err)
	}
}

func TestInjectHTTP(t *testing.T) {
	req := newRequest(t)
	fencing.InjectHTTP(req, 5)
	if got := req.Header.Values(fencing.HTTPHeader); len(got) != 1 || got[0] != "5" {
		t.Fatalf("header after InjectHTTP(5) = %q", got)
	}
	req.Header.Add(fencing.HTTPHeader, "3")
	fencing.InjectHTTP(req, 9)
	if got := req.Header.Values(fencing.HTTPHeader); len(got) != 1 || got[0] != "9" {
		t.Fatalf("header after InjectHTTP(9) = %q, want exactly [9]", got)
	}
	if tok, err := fencing.FromHTTP(req); err != nil || tok != 9 {
		t.Fatalf("FromHTTP = %d, %v; want 9", tok, err)
	}
	for _, bad := range []fencing.Token{0, -1} {
		fencing.InjectHTTP(req, bad)
		if got := req.Header.Values(fencing.HTTPHeader); len(got) != 0 {
			t.Fatalf("header after InjectHTTP(%d) = %q, want none", bad, got)
		}
	}
	// A request without a header map.
	req = &http.Request{}
	fencing.InjectHTTP(req, 0)
	if req.Header != nil {
		t.Fatal("InjectHTTP(0) created a header map")
	}
	fencing.InjectHTTP(req, 4)
	if tok, err := fencing.FromHTTP(req); err != nil || tok != 4 {
		t.Fatalf("FromHTTP = %d, %v; want 4", tok, err)
	}
}

func TestGRPCMetadata(t *testing.T) {
	md := fencing.ToGRPCMetadata(23)
	if got := md.Get(fencing.GRPCMetadataKey); len(got) != 1 || got[0] != "23" {
		t.Fatalf("ToGRPCMetadata(23) = %v", md)
	}
	if tok, err := fencing.FromGRPCMetadata(md); err != nil || tok != 23 {
		t.Fatalf("FromGRPCMetadata = %d, %v; want 23", tok, err)
	}
	for _, bad := range []fencing.Token{0, -3} {
		md := fencing.ToGRPCMetadata(bad)
		if md == nil || md.Len() != 0 {
			t.Fatalf("ToGRPCMetadata(%d) = %#v, want empty", bad, md)
		}
	}
	if _, err := fencing.FromGRPCMetadata(nil); !isMissing(err) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("nil md: error %v, want missing", err)
	}
	if _, err := fencing.FromGRPCMetadata(metadata.Pairs("other", "1")); !isMissing(err) {
		t.Fatalf("md without token: error %v, want missing", err)
	}
	// Pairs lower-cases keys; lookup is case-insensitive.
	if tok, err := fencing.FromGRPCMetadata(metadata.Pairs("Fencing-Token", "8")); err != nil || tok != 8 {
		t.Fatalf("FromGRPCMetadata(Fencing-Token: 8) = %d, %v", tok, err)
	}
	malformed := map[string]metadata.MD{
		"two values": metadata.Pairs(fencing.GRPCMetadataKey, "1", fencing.GRPCMetadataKey, "2"),
		"same twice": metadata.Pairs(fencing.GRPCMetadataKey, "2", fencing.GRPCMetadataKey, "2"),
		"comma list": metadata.Pairs(fencing.GRPCMetadataKey, "1,2"),
		"empty":      metadata.Pairs(fencing.GRPCMetadataKey, ""),
		"sign":       metadata.Pairs(fencing.GRPCMetadataKey, "+2"),
		"zero":       metadata.Pairs(fencing.GRPCMetadataKey, "0"),
	}
	for name, md := range malformed {
		tok, err := fencing.FromGRPCMetadata(md)
		if err == nil || !isMalformed(err) {
			t.Errorf("%s: FromGRPCMetadata = %d, %v; want malformed", name, tok, err)
		}
	}
}

func TestNewOutgoingContext(t *testing.T) {
	base := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("a", "1", fencing.GRPCMetadataKey, "3"))
	base = metadata.AppendToOutgoingContext(base, "b", "2", fencing.GRPCMetadataKey, "4")

	ctx := fencing.NewOutgoingContext(base, 10)
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		t.Fatal("no outgoing metadata")
	}
	if got := md.Get(fencing.GRPCMetadataKey); len(got) != 1 || got[0] != "10" {
		t.Fatalf("token values = %q, want exactly [10]", got)
	}
	if md.Get("a")[0] != "1" || md.Get("b")[0] != "2" {
		t.Fatalf("other metadata lost: %v", md)
	}
	// The parent context is unchanged.
	pmd, _ := metadata.FromOutgoingContext(base)
	if got := pmd.Get(fencing.GRPCMetadataKey); len(got) != 2 {
		t.Fatalf("parent metadata changed: %v", pmd)
	}

	// A hand-built MD with a non-lower-case key is replaced too.
	hand := metadata.NewOutgoingContext(context.Background(), metadata.MD{"Fencing-Token": {"2"}})
	md, _ = metadata.FromOutgoingContext(fencing.NewOutgoingContext(hand, 6))
	if got := md.Get(fencing.GRPCMetadataKey); len(got) != 1 || got[0] != "6" {
		t.Fatalf("token values = %q, want exactly [6]", got)
	}

	// Token <= 0 removes the key and keeps the rest.
	md, _ = metadata.FromOutgoingContext(fencing.NewOutgoingContext(base, 0))
	if got := md.Get(fencing.GRPCMetadataKey); len(got) != 0 {
		t.Fatalf("token values after NewOutgoingContext(0) = %q", got)
	}
	if len(md.Get("a")) != 1 {
		t.Fatalf("other metadata lost: %v", md)
	}

	// Without prior metadata.
	md, ok = metadata.FromOutgoingContext(fencing.NewOutgoingContext(context.Background(), 7))
	if !ok || md.Get(fencing.GRPCMetadataKey)[0] != "7" {
		t.Fatalf("metadata = %v", md)
	}
	if _, ok := metadata.FromOutgoingContext(fencing.NewOutgoingContext(context.Background(), 0)); ok {
		t.Fatal("NewOutgoingContext(0) on a bare context added metadata")
	}
}

func TestFromIncomingContext(t *testing.T) {
	if _, err := fencing.FromIncomingContext(context.Background()); !isMissing(err) {
		t.Fatalf("no metadata: error %v, want missing", err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x", "y"))
	if _, err := fencing.FromIncomingContext(ctx); !isMissing(err) {
		t.Fatalf("no token: error %v, want missing", err)
	}
	ctx = metadata.NewIncomingContext(context.Background(), fencing.ToGRPCMetadata(99))
	if tok, err := fencing.FromIncomingContext(ctx); err != nil || tok != 99 {
		t.Fatalf("FromIncomingContext = %d, %v; want 99", tok, err)
	}
	ctx = metadata.NewIncomingContext(context.Background(), metadata.Pairs(fencing.GRPCMetadataKey, "1", fencing.GRPCMetadataKey, "2"))
	if _, err := fencing.FromIncomingContext(ctx); !isMalformed(err) {
		t.Fatalf("two values: error %v, want malformed", err)
	}
}
