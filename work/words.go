package work

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// refusal says in words why the server refused a pull request: its status
// and description, with what a bare code means.
func refusal(m *nats.Msg) string {
	status, desc := m.Header.Get("Status"), strings.TrimSpace(m.Header.Get("Description"))
	switch {
	case status == "503":
		return "no responders (503): JetStream is not available, or the lane's stream or its leader is gone; asking again"
	case desc != "":
		return desc + " (" + status + ")"
	}
	return "status " + status
}
