package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestStoreErrorStaysOnTheServer: a request rejected because the store
// failed gets 503 (Unavailable) saying that the mark store failed, and
// nothing of the store's own error, which names the resource's files
// (or a database's hosts and tables). Admit, called from Go, still returns
// the whole error, wrapping guard.ErrStore. So does a request the
// verifier could not judge, with guard.ErrUnverified. The guard's logger
// (WithLogger) has the whole error: that of the first rejection of an
// outage (TestOutageLogsNotEachRequest), here one per guard.
func TestStoreErrorStaysOnTheServer(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "secret-marks")
		store := fileStore(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		errorStaysOnTheServer(t, guard.ErrStore, "secret-marks", guard.WithStore(store))
	})
	t.Run("verifier", func(t *testing.T) {
		v := newGrants()
		v.down = true
		errorStaysOnTheServer(t, guard.ErrUnverified, errDown.Error(), guard.WithVerifier(v))
	})
}

// errorStaysOnTheServer checks that guards built with opts reject token 7
// with an error wrapping sentinel and naming detail, and tell their HTTP
// and gRPC clients the sentinel's text but not detail, which they log.
func errorStaysOnTheServer(t *testing.T, sentinel error, detail string, opts ...guard.Option) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	opts = append(opts, guard.WithLogger(zap.New(core)))
	g := guard.New(opts...)
	k := guard.NewKeyed(opts...)

	_, _, err := g.Admit(context.Background(), 7)
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), detail) {
		t.Fatalf("Admit: %v, want an error wrapping %q that says %q", err, sentinel, detail)
	}
	told := func(what, msg string) {
		t.Helper()
		if strings.Contains(msg, detail) {
			t.Errorf("%s tells the client %q: %q", what, detail, msg)
		}
		if !strings.Contains(msg, sentinel.Error()) {
			t.Errorf("%s: %q does not say %q", what, msg, sentinel.Error())
		}
	}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a request reached the handler") })
	for name, h := range map[string]http.Handler{
		"Guard.HTTPMiddleware": g.HTTPMiddleware(next),
		"Keyed.HTTPMiddleware": k.HTTPMiddleware(func(r *http.Request) string { return r.URL.Path }, next),
	} {
		r := httptest.NewRequest(http.MethodPut, "/x", nil)
		fencing.InjectScopedHTTP(r, "/x", 7)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("%s: %d, want 503", name, w.Code)
		}
		told(name, w.Body.String())
	}
	handler := func(context.Context, any) (any, error) {
		t.Error("a call reached the handler")
		return nil, nil
	}
	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToScopedGRPCMetadata("/x", 7))
	for name, icpt := range map[string]grpc.UnaryServerInterceptor{
		"Guard.UnaryInterceptor": g.UnaryInterceptor(),
		"Keyed.UnaryInterceptor": k.UnaryInterceptor(func(context.Context, string, any) string { return "/x" }),
	} {
		_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, handler)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable", name, err)
		}
		told(name, status.Convert(err).Message())
	}
	entries := logs.All()
	if len(entries) != 2 {
		t.Errorf("%d log entries for 4 rejected clients of 2 guards, want 2: %v", len(entries), entries)
	}
	for _, e := range entries {
		if err, _ := e.ContextMap()["error"].(string); e.Level != zap.WarnLevel || !strings.Contains(err, detail) {
			t.Errorf("log entry %s %q with error %q, want a warning saying %q", e.Level, e.Message, err, detail)
		}
	}
}
