package nilness_test

import (
	"io"
	"os"
	"testing"

	"github.com/ahrtr/disco/internal/nilness"
)

func TestIs(t *testing.T) {
	var file *os.File
	var closer io.Closer = file
	var m map[string]int
	for _, c := range []struct {
		what string
		v    any
		want bool
	}{
		{"nil", nil, true},
		{"a nil pointer in an interface", closer, true},
		{"a nil map", m, true},
		{"a nil func", (func())(nil), true},
		{"a pointer", os.Stdout, false},
		{"a struct", struct{}{}, false},
		{"an int", 0, false},
	} {
		if got := nilness.Is(c.v); got != c.want {
			t.Errorf("Is(%s) = %v, want %v", c.what, got, c.want)
		}
	}
}
