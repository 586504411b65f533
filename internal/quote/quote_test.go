package quote_test

import (
	"strings"
	"testing"

	"github.com/ahrtr/disco/internal/quote"
)

func TestName(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"/jobs", `"/jobs"`},
		{strings.Repeat("x", quote.Show), `"` + strings.Repeat("x", quote.Show) + `"`},
		{strings.Repeat("x", 100), `"` + strings.Repeat("x", quote.Show) + `"... (100 bytes)`},
		// byte 64 is the second of an é: the cut moves back to its start.
		{"/" + strings.Repeat("é", 50), `"/` + strings.Repeat("é", 31) + `"... (101 bytes)`},
		// Not UTF-8, with no rune start in reach of byte 64: the bytes are
		// shown (escaped), not nothing.
		{strings.Repeat("\x80", 100), `"` + strings.Repeat(`\x80`, quote.Show) + `"... (100 bytes)`},
	} {
		if got := quote.Name(c.name); got != c.want {
			t.Errorf("Name(%.20q...) = %s, want %s", c.name, got, c.want)
		}
	}
}
