package planner

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Untrusted text (input lines, keys, subjects, consumer names, server
// messages) reaches terminals and error lines only through Quote or
// Printable: control characters, invisible format characters (such as
// bidirectional overrides) and invalid UTF-8 are escaped, and long text is
// cut, saying how long it was.

// Quote writes s in double quotes, escaped, cut after max bytes.
func Quote(s string, max int) string { return quoteCut(s, len(s), max) }

// quoteCut quotes the start of a text whose full length is total.
func quoteCut(s string, total, max int) string {
	head := cutAt(s, max)
	q := strconv.Quote(head)
	if total > len(head) {
		q += fmt.Sprintf("... (%d bytes)", total)
	}
	return q
}

// OneLine makes text fit a header value or a log field: one line (every
// run of white space one space), at most n bytes, cut at a character.
func OneLine(s string, n int) string {
	return cutAt(strings.Join(strings.Fields(s), " "), n)
}

// Printable escapes s like Quote, without the quotes: for table cells.
func Printable(s string, max int) string {
	if len(s) <= max && plainASCII(s) {
		return s
	}
	head := cutAt(s, max)
	var b strings.Builder
	for i := 0; i < len(head); {
		r, size := utf8.DecodeRuneInString(head[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, head[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	if len(head) < len(s) {
		fmt.Fprintf(&b, "... (%d bytes)", len(s))
	}
	return b.String()
}

func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// cutAt returns at most max bytes of s, not splitting a UTF-8 sequence.
func cutAt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && cut > max-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
