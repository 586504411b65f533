package guard_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// A resource protected by a Guard, and a client that stamps its requests
// with the token of its current grant.
func Example() {
	// Resource side. A real resource restores its persisted mark here with
	// guard.WithInitialMark.
	g := guard.New()
	srv := httptest.NewServer(g.HTTPMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Act on the resource only while r.Context() is alive.
		_, _ = io.WriteString(w, "written")
	})))
	defer srv.Close()

	// Client side: the token of the grant currently held, 0 for none.
	var current atomic.Int64
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: fencing.NewTransport(base, func() fencing.Token {
		return fencing.Token(current.Load())
	})}

	send := func() {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println("refused:", errors.Is(err, fencing.ErrNoToken))
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}

	send() // no grant: refused locally
	current.Store(12)
	send()          // accepted
	_ = g.Check(15) // a newer holder has reached the resource
	send()          // this client's grant is stale now

	// Output:
	// refused: true
	// 200 written
	// 409 guard: token 12 is below the mark 15: fencing: stale token
}
