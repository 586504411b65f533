package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// printer writes one line per event: its String, or with --json one JSON
// object.
type printer struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func newPrinter(g *globals) *printer { return &printer{w: g.stdout, json: g.json} }

func (p *printer) event(v fmt.Stringer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		b, err := json.Marshal(v)
		if err == nil {
			fmt.Fprintf(p.w, "%s\n", b)
			return
		}
	}
	fmt.Fprintln(p.w, v.String())
}

// stopSignals are the signals that end disco's wait or run: SIGINT
// (Ctrl-C), SIGTERM, and SIGHUP (the terminal or ssh session closed), which
// would otherwise kill disco without a release; but not SIGHUP if disco
// was started ignoring it (nohup): then it stays ignored, and CMD never
// hears of it.
var stopSignals = func() []os.Signal {
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}()

// notifyContext returns a context that ends at SIGINT, SIGTERM or SIGHUP.
func notifyContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, stopSignals...)
}
