package natstest

import (
	"net"
	"sync"
	"testing"
)

// Relay forwards TCP connections to a target address. Freeze stops every
// connection it carries without closing any: the peers see a node that
// hangs, like a machine that stopped answering or a network partition, and
// notice only through their own timeouts (a stopped server, by contrast,
// says goodbye and is known to be gone at once).
type Relay struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	thawed chan struct{} // closed while traffic flows
	conns  []net.Conn
}

// NewRelay listens on a free loopback port; it is closed when the test ends.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, target: target, thawed: make(chan struct{})}
	close(r.thawed)
	t.Cleanup(r.close)
	go r.accept()
	return r
}

// Addr is where to connect instead of the target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Freeze stops forwarding, in both directions, on every connection.
func (r *Relay) Freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.thawed:
		r.thawed = make(chan struct{})
	default:
	}
}

// Thaw lets traffic flow again.
func (r *Relay) Thaw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.thawed:
	default:
		close(r.thawed)
	}
}

// Cut closes every connection it carries at once, dropping whatever it
// holds for them, and lets new connections through: after a Freeze, the
// peers never see what the other side said last (a server that crashed
// rather than said goodbye).
func (r *Relay) Cut() {
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.Thaw()
}

func (r *Relay) gate() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.thawed
}

func (r *Relay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		go r.pipe(out, in)
		go r.pipe(in, out)
	}
}

func (r *Relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-r.gate()
			if _, err := dst.Write(buf[:n]); err != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			<-r.gate() // a frozen relay holds a close too
			dst.Close()
			return
		}
	}
}

func (r *Relay) close() {
	r.Thaw()
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}
