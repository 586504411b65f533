package embedded

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakPatience is how long TestMain gives goroutines to wind down before
// declaring them leaked. etcd's Close leaves idle keep-alive HTTP
// connections between members (the peer round-tripper used for version
// checks and lease forwarding is never closed); both ends are in this
// process, and they end when the peer listener's 5 s read timeout
// (rafthttp.ConnReadTimeout) fires on the serving side.
const leakPatience = 20 * time.Second

// TestMain runs the tests and then checks, with goleak, that no goroutine
// outlives them.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		start := time.Now()
		if err := settled(leakPatience); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		} else if testing.Verbose() {
			fmt.Printf("goroutines settled %v after the tests\n", time.Since(start).Round(time.Millisecond))
		}
	}
	os.Exit(code)
}

// settled polls goleak.Find, which itself retries for a couple of seconds,
// until it finds no leaked goroutine or patience runs out.
func settled(patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
