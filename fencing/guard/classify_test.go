package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/fencing/guard/storetest"
)

// TestCorruptStoreIsAStoreFailure: a store that cannot read its mark (a
// corrupt mark file; the error of markstore.File says what it could not
// parse) fails the request as a store failure: 503, Unavailable, metrics
// reason "store". It is not the client's token that is malformed, and a
// 400 would tell the client not to retry.
func TestCorruptStoreIsAStoreFailure(t *testing.T) {
	dir := t.TempDir()
	s, err := markstore.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Raise(context.Background(), "", 5); err != nil {
		t.Fatal(err)
	}
	marks, err := filepath.Glob(filepath.Join(dir, "mark-*"))
	if err != nil || len(marks) != 1 {
		t.Fatalf("mark files %v, %v", marks, err)
	}
	if err := os.WriteFile(marks[0], []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := guard.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	g := guard.New(guard.WithStore(s), guard.WithMetrics(m))

	err = g.Check(7)
	if !errors.Is(err, guard.ErrStore) || !errors.Is(err, markstore.ErrCorrupt) {
		t.Fatalf("Check on a corrupt mark: %v, want an error wrapping guard.ErrStore and markstore.ErrCorrupt", err)
	}
	if errors.Is(err, fencing.ErrNoToken) {
		t.Errorf("Check on a corrupt mark: %v wraps fencing.ErrNoToken: the client's token is fine", err)
	}

	h := g.HTTPMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a request reached the handler on a corrupt store")
	}))
	r := httptest.NewRequest(http.MethodPut, "/", nil)
	fencing.InjectHTTP(r, 7)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("HTTP on a corrupt store: %d (%s), want 503", w.Code, w.Body.String())
	}

	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToGRPCMetadata(7))
	_, err = g.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
		t.Error("a call reached the handler on a corrupt store")
		return nil, nil
	})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC on a corrupt store: %v, want Unavailable", err)
	}
	if n := storetest.Rejections(t, reg, guard.ReasonStore); n != 3 {
		t.Errorf("%v rejections with reason store, want 3", n)
	}
}
