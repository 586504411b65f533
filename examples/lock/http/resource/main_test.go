package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/fencing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResource(t *testing.T) {
	addr, log, stop := storytest.Serve(t, run)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "http://" + addr + "/kv/doc"
	put := func(token fencing.Token, body string) int {
		req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		fencing.InjectHTTP(req, token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(7, "seven"); code != http.StatusNoContent {
		t.Errorf("PUT token 7: %d, want 204", code)
	}
	if code := put(5, "five"); code != http.StatusConflict {
		t.Errorf("PUT token 5 after 7: %d, want 409", code)
	}
	if code := put(0, "none"); code != http.StatusPreconditionRequired {
		t.Errorf("PUT without token: %d, want 428", code)
	}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"disco_guard_admitted_total 1",
		`disco_guard_rejected_total{reason="stale"} 1`,
		`disco_guard_rejected_total{reason="missing"} 1`,
		"disco_guard_mark 7",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	tr.CloseIdleConnections()

	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	storytest.Mentions(t, "log", log.String(), "token=7 -> 204", "token=5 -> 409", "token=none -> 428", "stopped")
}
