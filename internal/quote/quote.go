// Package quote shows names in disco's error messages: a name is shown in
// full when short, and otherwise by its start, cut between runes, and its
// length, so that a name of a kilobyte does not fill the message.
package quote

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Show is how many bytes of a long name Name shows, at most.
const Show = 64

// Name returns name quoted (strconv.Quote) if it has at most Show bytes;
// else its first Show bytes or fewer, ending at a rune's boundary, quoted
// and followed by "... (N bytes)". Bytes that are not UTF-8 are shown
// escaped, as strconv.Quote shows them: a cut moves back no further than a
// rune's length.
func Name(name string) string {
	if len(name) <= Show {
		return strconv.Quote(name)
	}
	cut := Show
	for cut > Show-utf8.UTFMax && !utf8.RuneStart(name[cut]) {
		cut--
	}
	if !utf8.RuneStart(name[cut]) {
		cut = Show // no rune starts in reach: not UTF-8 there
	}
	return strconv.Quote(name[:cut]) + fmt.Sprintf("... (%d bytes)", len(name))
}
