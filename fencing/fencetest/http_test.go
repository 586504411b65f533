package fencetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A resource served under a path: a request whose URL is a path alone goes
// under the base URL's path, with its query.
func TestHTTPServerBasePath(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.RequestURI()
	}))
	defer srv.Close()
	for base, want := range map[string]string{
		srv.URL:           "/orders/42?mode=a",
		srv.URL + "/":     "/orders/42?mode=a",
		srv.URL + "/api/": "/api/orders/42?mode=a",
		srv.URL + "/api":  "/api/orders/42?mode=a",
	} {
		res := HTTPServer(base, nil, HTTPAPI{
			Write: func(scope, v string) *http.Request {
				return httptest.NewRequest(http.MethodPut, "/orders/42?mode=a", strings.NewReader(v))
			},
			Read: func(string) *http.Request { return httptest.NewRequest(http.MethodGet, "/orders/42", nil) },
		})
		if err := res.Write(context.Background(), Request{Token: "1", Value: "x"}); err != nil {
			t.Fatalf("base %s: write: %v", base, err)
		}
		if uri := <-got; uri != want {
			t.Fatalf("base %s: the write reached %q, want %s", base, uri, want)
		}
	}
}

// An escaped "/" in a request's path stays escaped under the base URL.
func TestHTTPServerKeepsEscapedPath(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.EscapedPath()
	}))
	defer srv.Close()
	res := HTTPServer(srv.URL+"/api", nil, HTTPAPI{
		Write: func(scope, v string) *http.Request {
			return httptest.NewRequest(http.MethodPut, "/orders/a%2Fb", strings.NewReader(v))
		},
		Read: func(string) *http.Request { return httptest.NewRequest(http.MethodGet, "/orders/a%2Fb", nil) },
	})
	if err := res.Write(context.Background(), Request{Token: "1", Value: "x"}); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "/api/orders/a%2Fb" {
		t.Fatalf("the write reached %q, want /api/orders/a%%2Fb", p)
	}
}

// A 5xx that a proxy or a failing handler answers (500, 502, 504) says
// nothing of whether the write was applied: the kit must allow both. A
// guard answers 503 before its handler runs: not applied.
func TestHTTPServerErrorsLeaveOutcomeOpen(t *testing.T) {
	for code, want := range map[int]outcome{
		http.StatusInternalServerError: unknown,
		http.StatusBadGateway:          unknown,
		http.StatusGatewayTimeout:      unknown,
		http.StatusServiceUnavailable:  refused,
		http.StatusConflict:            stale,
		http.StatusTeapot:              refused,
	} {
		if got := outcomeOf(httpRefusal(code, "body")); got != want {
			t.Errorf("HTTP %d: outcome %d, want %d", code, got, want)
		}
	}
}
