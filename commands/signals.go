package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Interrupted is the cause of the context Main cancels on the first
// SIGINT, SIGTERM or SIGHUP: commands stop, clean up, and exit 130.
type Interrupted struct{ Signal os.Signal }

func (e *Interrupted) Error() string { return "interrupted by " + signalName(e.Signal) }

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "Ctrl-C (SIGINT)"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP (the terminal or session closed)"
	case nil:
		return "the caller"
	}
	return s.String()
}

// secondSignal holds what a command asked to run on a second signal.
type secondSignal struct {
	mu sync.Mutex
	f  func()
}

type secondSignalKey struct{}

// onSecondSignal makes a second stop signal call f instead of ending
// the process at once; the command then finishes and exits 130 (lanes
// work naks what is in flight first). A third signal ends it at once. It
// does nothing under a context that notifySignals did not make.
func onSecondSignal(ctx context.Context, f func()) {
	if h, ok := ctx.Value(secondSignalKey{}).(*secondSignal); ok {
		h.mu.Lock()
		h.f = f
		h.mu.Unlock()
	}
}

// stopSignals stop a command: Ctrl-C, SIGTERM, and SIGHUP, which a closed
// terminal or a dropped ssh session sends. Left to its default, SIGHUP
// would end the process at once (exit 129) with nothing cleaned up or
// handed over.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// notifySignals returns a context cancelled by the first stop signal
// (SIGINT, SIGTERM or SIGHUP). A second signal ends the process at once
// with exit 130: it is how a user aborts a cleanup or a drain wait that
// takes too long (unless the command registered onSecondSignal). A SIGHUP
// after the first signal is not a second one: a closed terminal can send
// it twice (the kernel, then the shell passing it on to its jobs), and a
// hang-up is no request to hurry.
func notifySignals(stderr io.Writer) (context.Context, func()) {
	hook := &secondSignal{}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), secondSignalKey{}, hook))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	done := make(chan struct{})
	// next waits for a signal that asks to hurry; false when done.
	next := func() (os.Signal, bool) {
		for {
			select {
			case s := <-sigs:
				if s != syscall.SIGHUP {
					return s, true
				}
			case <-done:
				return nil, false
			}
		}
	}
	go func() {
		select {
		case s := <-sigs:
			cancel(&Interrupted{Signal: s})
		case <-done:
			return
		}
		s, ok := next()
		if !ok {
			return
		}
		hook.mu.Lock()
		f := hook.f
		hook.mu.Unlock()
		if f == nil {
			fmt.Fprintf(stderr, "lanes: %s again: stopping now, without cleaning up\n", signalName(s))
			os.Exit(ExitInterrupted)
		}
		f()
		if s, ok = next(); ok {
			fmt.Fprintf(stderr, "lanes: %s a third time: stopping now\n", signalName(s))
			os.Exit(ExitInterrupted)
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// interruptedMessage says that the run was interrupted, and adds the
// command's own error when it says more than "cancelled" (what was left
// to do, for example).
func interruptedMessage(ctx context.Context, err error) string {
	msg := "interrupted"
	var in *Interrupted
	if errors.As(context.Cause(ctx), &in) {
		msg = in.Error()
	}
	if err != nil && !isSilent(err) && !errors.Is(err, context.Canceled) && !errors.As(err, &in) {
		msg += ": " + err.Error()
	}
	return msg
}
