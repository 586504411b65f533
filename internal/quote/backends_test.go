package quote_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// Every backend refuses a name over 1 KiB with an error that shows the
// name's start, if it shows it, in whole runes: no rune of it is cut into
// escaped bytes, whatever byte the cut falls on.
func TestLongNamesQuotedInWholeRunes(t *testing.T) {
	for _, odd := range []string{"/", "/a"} {
		name := odd + strings.Repeat("é", 600)
		for backend, check := range map[string]func(string) error{
			"etcdio": etcdio.CheckName, "zkio": zkio.CheckName, "redisio": redisio.CheckName, "memio": memio.CheckName,
		} {
			err := check(name)
			if err == nil {
				t.Fatalf("%s took a name of %d bytes", backend, len(name))
			}
			if msg := err.Error(); !utf8.ValidString(msg) || strings.Contains(msg, `\x`) {
				t.Errorf("%s: %s: a rune of the name cut", backend, msg)
			}
		}
	}
}
