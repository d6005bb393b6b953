package work

import (
	"strings"
	"time"
)

// delivery is what a JetStream delivery's reply subject says of it.
type delivery struct {
	seq       uint64 // the stream's sequence
	dseq      uint64 // the consumer's (delivery) sequence
	attempt   int    // deliveries so far, this one included
	published time.Time
}

// parseDelivery reads a delivery's ack subject, in either form the server
// sends:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// as nats.go's Msg.Metadata does (a number that is not one reads as 0),
// without its allocations: a lane reads every message's.
func parseDelivery(reply string) (delivery, bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return delivery{}, false
	}
	var toks [9]string // the first nine tokens after $JS.ACK.
	n := 0
	for {
		tok, more, found := strings.Cut(rest, ".")
		if n < len(toks) {
			toks[n] = tok
		}
		n++
		if !found {
			break
		}
		rest = more
	}
	// n counts the tokens after $JS.ACK: 7 in the old form, 9 or more in
	// the new one.
	var f []string
	switch {
	case n == 7:
		f = toks[2:7]
	case n >= 9:
		f = toks[4:9]
	default:
		return delivery{}, false
	}
	return delivery{
		attempt:   int(ackNum(f[0])),
		seq:       ackNum(f[1]),
		dseq:      ackNum(f[2]),
		published: time.Unix(0, int64(ackNum(f[3]))),
	}, true
}

// ackNum reads a number of an ack subject: 0 when it is not all digits.
func ackNum(s string) uint64 {
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
