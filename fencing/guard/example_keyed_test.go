package guard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// A service that locks per order keeps one mark per lock. The resource
// says which lock a request needs (here from its path); the token must name
// that lock, and the marks live in a store, so they survive a restart and
// only the scopes in use stay in memory.
func ExampleKeyed_HTTPMiddleware() {
	dir, err := os.MkdirTemp("", "marks-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := markstore.NewFile(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	k := guard.NewKeyed(guard.WithStore(store))
	orderLock := func(r *http.Request) string { // /orders/42 -> /locks/orders/42
		return "/locks" + r.URL.Path
	}
	srv := httptest.NewServer(k.HTTPMiddleware(orderLock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	send := func(path, scope string, t fencing.Token) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+path, nil)
		fencing.InjectScopedHTTP(req, scope, t)
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s with %s@%d: %d\n", path, scope, t, resp.StatusCode)
	}
	send("/orders/42", "/locks/orders/42", 100) // accepted, 100 stored
	send("/orders/43", "/locks/orders/43", 90)  // another lock: its own mark
	send("/orders/42", "/locks/orders/43", 101) // a token of another lock
	send("/orders/42", "/locks/orders/42", 99)  // stale

	// After a restart, a guard on the same store still knows the marks.
	restarted := guard.NewKeyed(guard.WithStore(store))
	err = restarted.Check("/locks/orders/42", 99)
	fmt.Println(strings.Contains(fmt.Sprint(err), "below the mark 100"))

	// Output:
	// /orders/42 with /locks/orders/42@100: 200
	// /orders/43 with /locks/orders/43@90: 200
	// /orders/42 with /locks/orders/43@101: 403
	// /orders/42 with /locks/orders/42@99: 409
	// true
}
