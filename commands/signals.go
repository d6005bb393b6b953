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
// SIGINT or SIGTERM: commands stop, clean up, and exit 130.
type Interrupted struct{ Signal os.Signal }

func (e *Interrupted) Error() string { return "interrupted by " + signalName(e.Signal) }

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "Ctrl-C (SIGINT)"
	case syscall.SIGTERM:
		return "SIGTERM"
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

// onSecondSignal makes a second SIGINT or SIGTERM call f instead of ending
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

// notifySignals returns a context cancelled by the first SIGINT or
// SIGTERM. A second signal ends the process at once with exit 130: it is
// how a user aborts a cleanup or a drain wait that takes too long (unless
// the command registered onSecondSignal).
func notifySignals(stderr io.Writer) (context.Context, func()) {
	hook := &secondSignal{}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), secondSignalKey{}, hook))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(&Interrupted{Signal: s})
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			hook.mu.Lock()
			f := hook.f
			hook.mu.Unlock()
			if f == nil {
				fmt.Fprintf(stderr, "lanes: %s again: stopping now, without cleaning up\n", signalName(s))
				os.Exit(ExitInterrupted)
			}
			f()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "lanes: %s a third time: stopping now\n", signalName(s))
			os.Exit(ExitInterrupted)
		case <-done:
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
