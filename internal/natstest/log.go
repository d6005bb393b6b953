package natstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// serverLog keeps an embedded server's notices, warnings and errors, and
// prints them only when the test fails: a server-side reason (a store that
// could not be created, a leader that stepped down) is then in the output.
type serverLog struct {
	mu    sync.Mutex
	name  string
	lines []string
}

func attachLog(t testing.TB, s *Server) {
	l := &serverLog{name: s.Opts.ServerName}
	s.SetLogger(l, false, false)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.lines) > 0 {
			t.Logf("nats-server %s log:\n%s", l.name, strings.Join(l.lines, "\n"))
		}
	})
}

func (l *serverLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 2000 {
		l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
	}
}

func (l *serverLog) Noticef(format string, v ...any) { l.add("[INF]", format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.add("[WRN]", format, v...) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.add("[FTL]", format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.add("[ERR]", format, v...) }
func (l *serverLog) Debugf(string, ...any)           {}
func (l *serverLog) Tracef(string, ...any)           {}
