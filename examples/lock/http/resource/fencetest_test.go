package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/fencing/fencetest"
)

// TestFences: the resource server, reached over HTTP at its address,
// passes the resource test kit. It persists nothing (see run), so it
// declares no restart.
func TestFences(t *testing.T) {
	addr, _, stop := storytest.Serve(t, run)
	fencetest.Run(t, fencetest.HTTPServer("http://"+addr, nil, fencetest.HTTPAPI{
		Write: func(_, value string) *http.Request {
			return httptest.NewRequest(http.MethodPut, "/kv/doc", strings.NewReader(value))
		},
		Read: func(string) *http.Request { return httptest.NewRequest(http.MethodGet, "/kv/doc", nil) },
	}))
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
