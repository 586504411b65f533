package faultsuite

import (
	"fmt"
	"testing"
	"time"
)

// TestSQLRegisterChecksTokens: the SQLite register, whose check is in the
// UPDATE itself, accepts a token at or above the highest it has accepted
// and refuses a lower one, and logs exactly what it accepted, in order.
func TestSQLRegisterChecksTokens(t *testing.T) {
	sq := openSQLRegister(t)
	sq.reset(t, clock{base: time.Now()})
	for i, c := range []struct {
		tok  int64
		want outcome
	}{{5, accepted}, {3, stale}, {9, accepted}, {5, stale}, {9, accepted}} {
		if o := sq.write(0, fmt.Sprint(i), c.tok); o.out != c.want {
			t.Errorf("write %d with token %d: outcome %d, want %d", i, c.tok, o.out, c.want)
		}
	}
	tokens, values := sq.logged(t)
	if err := checkOrder("SQLite", tokens); err != nil || len(tokens) != 3 || fmt.Sprint(values) != "[0 2 4]" {
		t.Errorf("SQLite log %v %v: %v", tokens, values, err)
	}
}
