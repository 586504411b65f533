package fencing_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"

	"github.com/ahrtr/disco/fencing"
)

// roundTripFunc answers every request with what f returns.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A request built by hand may have no Header at all: the transport stamps
// it all the same (http.Transport accepts such a request), and does not
// touch the caller's request.
func TestTransportRequestWithoutHeader(t *testing.T) {
	var sent http.Header
	tr := fencing.NewScopedTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}), func() (string, fencing.Token) { return "/locks/a", 7 })
	u, _ := url.Parse("http://resource/orders/1")
	req := &http.Request{Method: http.MethodGet, URL: u}
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got := sent.Values(fencing.HTTPHeader); len(got) != 1 || got[0] != "7" {
		t.Fatalf("sent %s %q, want [7]", fencing.HTTPHeader, got)
	}
	if sent.Get(fencing.ScopeHTTPHeader) == "" {
		t.Fatalf("sent no %s", fencing.ScopeHTTPHeader)
	}
	if req.Header != nil {
		t.Fatalf("the caller's request was changed: %v", req.Header)
	}
}

// The token replaces any value the request had, under whatever spelling of
// the header's name (a header map copied from a lower-cased source): a
// request never carries two tokens or two scopes.
func TestTransportReplacesEverySpelling(t *testing.T) {
	var sent http.Header
	tr := fencing.NewScopedTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}), func() (string, fencing.Token) { return "/locks/a", 9 })
	req, _ := http.NewRequest(http.MethodGet, "http://resource/", nil)
	req.Header["fencing-token"] = []string{"3"}
	req.Header["fencing-scope"] = []string{"/locks/b"}
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	var tokens, scopes []string
	for k, v := range sent {
		switch http.CanonicalHeaderKey(k) {
		case fencing.HTTPHeader:
			tokens = append(tokens, v...)
		case fencing.ScopeHTTPHeader:
			scopes = append(scopes, v...)
		}
	}
	if len(tokens) != 1 || tokens[0] != "9" || len(scopes) != 1 {
		t.Fatalf("sent tokens %q and scopes %q, want [9] and one scope", tokens, scopes)
	}

	req, _ = http.NewRequest(http.MethodGet, "http://resource/", nil)
	req.Header["fencing-token"] = []string{"3"}
	fencing.InjectHTTP(req, 9)
	if tok, err := fencing.FromHTTP(req); err != nil || tok != 9 || len(req.Header) != 1 {
		t.Fatalf("after InjectHTTP: %d, %v, header %v; want 9 alone", tok, err, req.Header)
	}
	fencing.InjectHTTP(req, 0)
	req.Header["fencing-token"] = []string{"3"}
	fencing.InjectHTTP(req, 0)
	if len(req.Header) != 0 {
		t.Fatalf("InjectHTTP of no token left %v", req.Header)
	}
}

// FromGRPCMetadata looks the key up case-insensitively, as it says: a
// hand-built metadata.MD need not be lower-cased.
func TestFromGRPCMetadataAnyCase(t *testing.T) {
	if tok, err := fencing.FromGRPCMetadata(metadata.MD{"Fencing-Token": {"5"}}); err != nil || tok != 5 {
		t.Fatalf("FromGRPCMetadata of Fencing-Token: %d, %v; want 5", tok, err)
	}
	if _, err := fencing.FromGRPCMetadata(metadata.MD{"Fencing-Token": {"5"}, "fencing-token": {"6"}}); err == nil {
		t.Fatal("two spellings of the key, two tokens: no error")
	}
}

// TestInjectIntoNilRequest: InjectHTTP and InjectScopedHTTP have no
// request to stamp in a nil one, and do nothing, as FromHTTP and
// ScopeFromHTTP answer a nil request with "no token" rather than panic.
func TestInjectIntoNilRequest(t *testing.T) {
	for name, f := range map[string]func(){
		"InjectHTTP(nil, 5)":             func() { fencing.InjectHTTP(nil, 5) },
		"InjectHTTP(nil, 0)":             func() { fencing.InjectHTTP(nil, 0) },
		`InjectScopedHTTP(nil, "/a", 5)`: func() { fencing.InjectScopedHTTP(nil, "/a", 5) },
		`InjectScopedHTTP(nil, "", 0)`:   func() { fencing.InjectScopedHTTP(nil, "", 0) },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", name, r)
				}
			}()
			f()
		}()
	}
}

// TestLongBadValuesQuotedInWholeRunes: a malformed token or scope is shown
// in errors by its start only, cut between runes: never a rune cut into
// escaped bytes.
func TestLongBadValuesQuotedInWholeRunes(t *testing.T) {
	bad := "1" + strings.Repeat("é", 40)
	_, errTok := fencing.ParseToken(bad)
	_, errScope := fencing.DecodeScope(bad)
	for what, err := range map[string]error{"token": errTok, "scope": errScope} {
		if err == nil {
			t.Fatalf("%s %q accepted", what, bad)
		}
		if msg := err.Error(); !utf8.ValidString(msg) || strings.Contains(msg, `\x`) {
			t.Errorf("%s: %s: a rune of the value cut", what, msg)
		}
	}
}
