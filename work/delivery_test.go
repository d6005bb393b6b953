package work

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// parseDelivery reads what nats.go's Msg.Metadata reads, and refuses
// what it refuses.
func FuzzParseDelivery(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.orders.orders-n8-07.1.42.40.1764000000000000000.3",
		"$JS.ACK._.ACCHASH.orders.orders-n8-07.2.42.40.1764000000000000000.3.rnd",
		"$JS.ACK.hub.ACCHASH.orders.orders-n8-07.2.42.40.1764000000000000000.3",
		"$JS.ACK.hub.ACCHASH.orders.orders-n8-07.2.42.40.1764000000000000000.3.rnd.more",
		"$JS.ACK.orders.orders-n8-07.x.42.40.17.3",
		"$JS.ACK.orders.orders-n8-07.1.42.40.17",
		"$JS.ACK.orders.orders-n8-07.1.42.40.17.3.",
		"$JS.ACK.a.b.c.d.e.f.g.h.i.j",
		"$JS.ACK.",
		"$JS.ACK",
		"$JS.NAK.orders.orders-n8-07.1.42.40.17.3",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		d, ok := parseDelivery(reply)
		meta, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if ok != (err == nil) {
			t.Fatalf("%q: parsed %v, nats.go's error %v", reply, ok, err)
		}
		if !ok {
			return
		}
		if d.seq != meta.Sequence.Stream || d.dseq != meta.Sequence.Consumer || d.attempt != int(meta.NumDelivered) || !d.published.Equal(meta.Timestamp) {
			t.Fatalf("%q: parsed %+v, nats.go read %+v", reply, d, meta)
		}
	})
}

func TestParseDeliveryAllocatesNothing(t *testing.T) {
	reply := "$JS.ACK._.ACCHASH.orders.orders-n8-07.2.42.40.1764000000000000000.3.rnd"
	if n := testing.AllocsPerRun(100, func() { parseDelivery(reply) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
