// Package handlers are the work.Handler implementations behind lanes work's
// --exec and --http: a program run per message (Exec: the payload on stdin,
// the message's metadata in LANES_* variables, the exit code says ack,
// terminate or retry) and a POST per message to a local service (HTTP: the
// metadata in Lanes-* headers, the status says). A Go program processing
// messages itself implements work.Handler instead.
package handlers
