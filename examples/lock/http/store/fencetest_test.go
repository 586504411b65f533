package store

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ahrtr/disco/fencing/fencetest"
	"github.com/ahrtr/disco/fencing/guard"
)

// api is how the kit reaches the store: PUT and GET /kv/doc.
var api = fencetest.HTTPAPI{
	Write: func(_, value string) *http.Request {
		return httptest.NewRequest(http.MethodPut, "/kv/doc", strings.NewReader(value))
	},
	Read: func(string) *http.Request { return httptest.NewRequest(http.MethodGet, "/kv/doc", nil) },
}

// TestFences: the store behind its guard passes the resource test kit. It
// keeps its data and its mark in memory only (see Store), so it declares
// no restart.
func TestFences(t *testing.T) {
	r := fencetest.HTTPHandler(func() http.Handler { return New().Handler(guard.New(), nil) }, api)
	r.Restart = nil // data and mark live and die together, in memory
	fencetest.Run(t, r)
}
