package fencetest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing/fencetest"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// notes is your resource's data: one note per order. In a real service it
// is a database; here a map, which outlives the servers in front of it as a
// database outlives the processes that use it.
type notes struct {
	mu sync.Mutex
	m  map[string]string
}

// newOrdersServer is your resource: PUT /orders/{id}/note writes an order's
// note and needs the fencing token of the order's lock, /locks/orders/{id};
// GET reads it. A keyed guard keeps one mark per order in marks, a
// directory of files, so that a restarted server still knows them.
func newOrdersServer(db *notes, marksDir string) http.Handler {
	marks, err := markstore.NewFile(marksDir)
	if err != nil {
		panic(err)
	}
	k := guard.NewKeyed(guard.WithStore(marks))
	lockOf := func(r *http.Request) string { return "/locks/orders/" + r.PathValue("id") }
	mux := http.NewServeMux()
	mux.Handle("PUT /orders/{id}/note", k.HTTPMiddleware(lockOf, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		db.mu.Lock()
		defer db.mu.Unlock()
		if r.Context().Err() != nil { // a newer token arrived while the body was read
			http.Error(w, "superseded", http.StatusConflict)
			return
		}
		db.m[r.PathValue("id")] = string(note)
		w.WriteHeader(http.StatusNoContent)
	})))
	mux.HandleFunc("GET /orders/{id}/note", func(w http.ResponseWriter, r *http.Request) {
		db.mu.Lock()
		note, ok := db.m[r.PathValue("id")]
		db.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, note)
	})
	return mux
}

// testOrdersFence is the test you write, in your package:
// func TestOrdersFence(t *testing.T). It proves that the orders server
// fences: stale, missing and malformed tokens, tokens of another order,
// a restart, many owners at once.
func testOrdersFence(t *testing.T) {
	db := &notes{m: make(map[string]string)}
	marksDir := t.TempDir()
	orders := fencetest.HTTPHandler(
		func() http.Handler { return newOrdersServer(db, marksDir) }, // a restart: a new server on the same data and marks
		fencetest.HTTPAPI{
			Write: func(scope, note string) *http.Request {
				id := strings.TrimPrefix(scope, "/locks/orders/")
				return httptest.NewRequest(http.MethodPut, "/orders/"+id+"/note", strings.NewReader(note))
			},
			Read: func(scope string) *http.Request {
				id := strings.TrimPrefix(scope, "/locks/orders/")
				return httptest.NewRequest(http.MethodGet, "/orders/"+id+"/note", nil)
			},
		})
	orders.Keyed = true                   // one lock, one mark, per order
	orders.ScopePrefix = "/locks/orders/" // the kit's scopes are orders' locks
	fencetest.Run(t, orders)
}

func Example_handler() {
	// go test runs the test as it runs any other:
	//
	//	func TestOrdersFence(t *testing.T) { testOrdersFence(t) }
	//
	// and reports each history as a subtest: TestOrdersFence/StaleWrite,
	// TestOrdersFence/StaleWriteAfterRestart, ... ForgedToken is skipped
	// with a report that one forged token bricks the server, as its guard
	// has no verifier.
	_ = testOrdersFence
}
