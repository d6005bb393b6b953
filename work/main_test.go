package work_test

import (
	"os"
	"testing"

	"github.com/lanes-dev/lanes/internal/natstest"
)

// TestMain lets a benchmark run its nats-server in a process of its own
// (this test binary re-executed, see natstest.StartProcess), so that the
// server's CPU time is read apart from the workers'.
func TestMain(m *testing.M) {
	natstest.ServeIfChild()
	os.Exit(m.Run())
}
