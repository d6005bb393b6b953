package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/workload"
)

// Where simulate's keys come from: the seed's names, uniform or Zipf
// generated keys, a file of subjects with counts, or a live stream's
// per-subject message counts.

// simulationKeys returns the workload's keys and a description of where
// they came from.
func simulationKeys(ctx context.Context, o SimulateOptions) (workload.Keys, string, error) {
	subject := keySubjecter(o.Plan)
	switch {
	case o.FromStream != "":
		k, err := streamKeys(ctx, o)
		return k, "stream " + o.FromStream, err
	case strings.HasPrefix(o.Keys, "file:"):
		k, err := fileKeys(ctx, o, strings.TrimPrefix(o.Keys, "file:"))
		return k, o.Keys, err
	case o.SeedStory:
		k, err := workload.NamedKeys(seedKeys, subject)
		return k, strings.Join(seedKeys, ", "), err
	}
	spec := o.Keys
	if spec == "" {
		spec = defaultKeys
	}
	if n := workload.KeyCount(spec); n <= planner.MaxSimKeys {
		if err := o.checkSize(n); err != nil {
			return workload.Keys{}, "", err
		}
	}
	k, err := workload.ParseKeys(spec, subject)
	if err != nil {
		return k, "", badInput(err)
	}
	return k, spec, nil
}

// keySubjecter builds the published subject for a generated key name. A
// design whose key has several tokens gets the name in the first and
// fillers in the others (the server hashes them concatenated).
func keySubjecter(p *planner.Plan) workload.Subjecter {
	n := len(p.Design.KeyTokens)
	return func(key string) (string, error) {
		if n > 1 && !strings.Contains(key, ".") {
			key += strings.Repeat(".k", n-1)
		}
		return p.SubjectForKey(key)
	}
}

// fileKeys reads "SUBJECT [COUNT]" lines, like lanes plan --keys, through
// the same reader (a file, - for stdin, a pipe or a FIFO); the count is the
// key's weight.
func fileKeys(ctx context.Context, o SimulateOptions, path string) (workload.Keys, error) {
	if path == "" {
		return workload.Keys{}, usageErrorf("--keys file: names no file: write file:PATH (or file:- for stdin)")
	}
	r, err := keyfile.Open(ctx, keyfile.Input{Path: path, Stdin: o.IO.In, Flag: "--keys file:"}, o.Plan)
	if err != nil {
		return workload.Keys{}, err
	}
	defer r.Close()
	var k workload.Keys
	limit := workload.KeysWithin(o.Messages, o.workers())
	err = r.Each(ctx, func(parsed planner.Parsed) error {
		k.Add(string(parsed.Key), string(parsed.Subject), float64(parsed.Count))
		if len(k.Names) > limit {
			return usageErrorf("%s: more than %d distinct keys: with --messages %d and %d workers a simulation takes at most %d keys (use a sample)",
				r.Name(), limit, o.Messages, o.workers(), limit)
		}
		return nil
	})
	if err != nil {
		return k, err
	}
	if len(k.Names) == 0 {
		return k, usageErrorf("%s: no subjects in the file", r.Name())
	}
	return k, nil
}

// streamKeys reads the per-subject message counts of a live stream. The
// stream may hold partitioned subjects: Unmap rebuilds the published one.
func streamKeys(ctx context.Context, o SimulateOptions) (workload.Keys, error) {
	conn, err := connect.Open(ctx, o.Conn)
	if err != nil {
		return workload.Keys{}, err
	}
	defer conn.Close()
	counts, err := subjectCounts(ctx, conn, o.FromStream)
	if err != nil {
		return workload.Keys{}, err
	}
	return keysFromCounts(o.Plan, o.FromStream, counts)
}

func subjectCounts(ctx context.Context, conn *connect.Conn, stream string) (map[string]uint64, error) {
	api := jsapi.New(conn)
	fail := func(err error) error {
		if jsapi.IsStreamNotFound(err) {
			return usageErrorf("--from-stream %q: no such stream on %s", stream, conn.Server)
		}
		var ce *connect.Error
		if errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("--from-stream %q: reading its subject counts: %w", stream, err)
	}
	info, err := api.StreamInfo(ctx, stream)
	if err != nil {
		return nil, fail(err)
	}
	// The same cap as inspect's placement check: one page of the subject list.
	if n := info.State.NumSubjects; n > planner.MaxSubjects {
		return nil, usageErrorf("--from-stream %q has %d subjects; simulate reads at most %d: use --keys file: with a sample (nats stream subjects %s)", stream, n, planner.MaxSubjects, stream)
	}
	counts, err := api.Subjects(ctx, stream, ">")
	if err != nil {
		return nil, fail(err)
	}
	return counts, nil
}

func keysFromCounts(p *planner.Plan, stream string, counts map[string]uint64) (workload.Keys, error) {
	subjects := make([]string, 0, len(counts))
	for s := range counts {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects) // map order is random; the workload must not be
	var k workload.Keys
	skipped := 0
	for _, stored := range subjects {
		published := stored
		if _, ok := p.Layout.PartitionOf([]byte(stored)); !ok {
			var unmapped bool
			if published, unmapped = p.Layout.Unmap(stored); !unmapped {
				skipped++
				continue
			}
		}
		k.Add(p.Layout.Key([]byte(published)), published, float64(counts[stored]))
	}
	if len(k.Names) == 0 {
		return k, usageErrorf("--from-stream %q: no messages on subjects matching %s (%d other subjects)", stream, p.Design.Subject, skipped)
	}
	return k, nil
}
