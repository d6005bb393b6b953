package converge_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
)

func owner(design string) converge.LockOwner {
	host, _ := os.Hostname()
	return converge.LockOwner{Host: host, PID: os.Getpid(), Design: design, Command: "lanes apply"}
}

// TestLockOneAtATime: a second apply on the same stream is refused at
// once, naming the holder; another stream is not locked; after the
// release the lock is free again.
func TestLockOneAtATime(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	ctx := context.Background()
	first, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = converge.AcquireLock(ctx, open(t, srv.URL()), "ORDERS", owner("other"), converge.LockOptions{})
	var locked *converge.LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("second lock: want LockedError, got %v", err)
	}
	msg := err.Error()
	host, _ := os.Hostname()
	for _, want := range []string{"ORDERS", "pid " + strconv.Itoa(os.Getpid()), host, "design orders", "--lock-timeout"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the refusal must name %q: %s", want, msg)
		}
	}
	other, err := converge.AcquireLock(ctx, c, "PAYMENTS", owner("payments"), converge.LockOptions{})
	if err != nil {
		t.Fatalf("another stream's lock: %v", err)
	}
	other.Release(ctx)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{})
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	again.Release(ctx)
}

// TestLockWaitsForTheHolder: with a wait, the second apply gets the lock
// as soon as the first releases it.
func TestLockWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	ctx := context.Background()
	first, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { first.Release(ctx) })
	start := time.Now()
	second, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("waiting for the lock: %v", err)
	}
	defer second.Release(ctx)
	if took := time.Since(start); took < 400*time.Millisecond || took > 10*time.Second {
		t.Fatalf("got the lock after %s, want right after the release (500ms)", took)
	}
}

// TestLockRenewedAndExpires: a holder keeps its lock beyond the TTL by
// renewing it; one that stops renewing (killed) loses it after the TTL,
// and learns so if it comes back.
func TestLockRenewedAndExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: locks let live and expire over 2.5 TTLs, 4s")
	}
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	ctx := context.Background()
	var lost atomic.Int32
	held, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{TTL: time.Second, OnLost: func(error) { lost.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.JS.KeyValue(ctx, converge.LockBucket)
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		e, err := kv.Get(ctx, "stream.ORDERS")
		if err != nil {
			t.Fatalf("the lock's key: %v", err)
		}
		return e.Revision()
	}
	taken := revision()
	time.Sleep(2500 * time.Millisecond) // two and a half TTLs
	// Renewed, not merely not expired yet (the server expires a key up to
	// 1.25s after its TTL, later when loaded): each renewal writes the key.
	if renewed := revision(); renewed < taken+2 {
		t.Fatalf("the lock's key was written %d times in 2.5 TTLs: not renewed every third of its TTL", renewed-taken)
	}
	if _, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{}); !errors.As(err, new(*converge.LockedError)) {
		t.Fatalf("a renewed lock must still be held after 2.5 TTLs: %v", err)
	}
	if lost.Load() != 0 {
		t.Fatal("a renewed lock was reported lost")
	}
	held.Release(ctx)

	// A holder that dies: its process is gone, nobody renews.
	dead := open(t, srv.URL())
	if _, err := converge.AcquireLock(ctx, dead, "ORDERS", owner("orders"), converge.LockOptions{TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	dead.NC.Close()
	start := time.Now()
	next, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("a dead holder's lock must expire: %v", err)
	}
	t.Logf("a dead holder's lock (TTL 1s) was free after %s", time.Since(start))
	next.Release(ctx)
}

// TestLockLost: a holder whose lock was taken over (it expired while the
// holder was cut off) learns at its next renewal and is told to stop.
func TestLockLost(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	ctx := context.Background()
	lost := make(chan error, 1)
	held, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{TTL: 3 * time.Second, OnLost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	_, js := natstest.Connect(t, srv.URL())
	kv, err := js.KeyValue(ctx, converge.LockBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "stream.ORDERS"); err != nil { // as if it expired
		t.Fatal(err)
	}
	if _, err := converge.AcquireLock(ctx, c, "ORDERS", owner("intruder"), converge.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		var ll *converge.LockLostError
		if !errors.As(err, &ll) {
			t.Fatalf("want LockLostError, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told it lost the lock")
	}
}

// TestLockOfAKilledApplyIsTakenOver: a holder on this host whose process
// is gone (kill -9) does not make the next apply wait for its TTL.
func TestLockOfAKilledApplyIsTakenOver(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("process and pid namespace checks are Linux only")
	}
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	ctx := context.Background()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := owner("orders")
	dead.PID = gone.Process.Pid
	held, err := converge.AcquireLock(ctx, open(t, srv.URL()), "ORDERS", dead, converge.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	start := time.Now()
	next, err := converge.AcquireLock(ctx, c, "ORDERS", owner("orders"), converge.LockOptions{})
	if err != nil {
		t.Fatalf("the lock of a process that is gone must be taken over: %v", err)
	}
	defer next.Release(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s", took)
	}
}
