package main

import (
	"context"
	"testing"
	"time"
)

// The README's quick start runs end to end: the guard refuses the late
// write (run fails otherwise).
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
