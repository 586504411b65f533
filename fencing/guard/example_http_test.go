package guard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// HTTPMiddleware puts a guard in front of a handler: a request whose
// Fencing-Token is below the highest seen gets 409 Conflict and never
// reaches the handler.
func ExampleGuard_HTTPMiddleware() {
	g := guard.New()
	srv := httptest.NewServer(g.HTTPMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Act on the resource only while r.Context() is alive: it is
		// cancelled if a higher token arrives meanwhile.
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()

	for _, t := range []fencing.Token{5, 7, 5} {
		req, err := http.NewRequest(http.MethodPut, srv.URL, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fencing.InjectHTTP(req, t)
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("token %d: %d\n", t, resp.StatusCode)
	}

	// Output:
	// token 5: 200
	// token 7: 200
	// token 5: 409
}
