package sim

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

// Where the keys come from: the seed's names, uniform or Zipf generated
// keys, a keys file (plan --keys' format, read by the same reader), or a
// live stream's per-subject message counts.

// keys returns the workload's keys and where they came from, in words.
func (o Options) keys(ctx context.Context) (workload.Keys, string, error) {
	subject := keySubjecter(o.Plan)
	switch {
	case o.FromStream != "":
		k, err := o.streamKeys(ctx)
		return k, "stream " + o.FromStream, err
	case strings.HasPrefix(o.Keys, "file:"):
		k, err := o.fileKeys(ctx, strings.TrimPrefix(o.Keys, "file:"))
		return k, o.Keys, err
	case o.SeedStory:
		k, err := workload.NamedKeys(SeedKeys, subject)
		return k, strings.Join(SeedKeys, ", "), err
	}
	spec := o.Keys
	if spec == "" {
		spec = defaultKeys
	}
	if n := workload.KeyCount(spec); n <= planner.MaxSimKeys {
		if err := o.CheckSize(n); err != nil {
			return workload.Keys{}, "", err
		}
	}
	k, err := workload.ParseKeys(spec, subject)
	if err != nil {
		return k, "", &InputError{err}
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

// fileKeys reads "SUBJECT [COUNT]" lines (a file, - for stdin, a pipe or a
// FIFO); the count is the key's weight.
func (o Options) fileKeys(ctx context.Context, path string) (workload.Keys, error) {
	if path == "" {
		return workload.Keys{}, inputErrorf("--keys file: names no file: write file:PATH (or file:- for stdin)")
	}
	r, err := keyfile.Open(ctx, keyfile.Input{Path: path, Stdin: o.Stdin, Flag: "--keys file:"}, o.Plan)
	if err != nil {
		return workload.Keys{}, err
	}
	defer r.Close()
	var k workload.Keys
	limit := workload.KeysWithin(o.Messages, o.workers())
	err = r.Each(ctx, func(p planner.Parsed) error {
		k.Add(string(p.Key), string(p.Subject), float64(p.Count))
		if len(k.Names) > limit {
			return inputErrorf("%s: more than %d distinct keys: with --messages %d and %d workers a simulation takes at most %d keys (use a sample)",
				r.Name(), limit, o.Messages, o.workers(), limit)
		}
		return nil
	})
	if err != nil {
		return k, err
	}
	if len(k.Names) == 0 {
		return k, inputErrorf("%s: no subjects in the file", r.Name())
	}
	return k, nil
}

// streamKeys reads the per-subject message counts of a live stream.
func (o Options) streamKeys(ctx context.Context) (workload.Keys, error) {
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
			return inputErrorf("--from-stream %q: no such stream on %s", stream, conn.Server)
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
		return nil, inputErrorf("--from-stream %q has %d subjects; simulate reads at most %d: use --keys file: with a sample (nats stream subjects %s)", stream, n, planner.MaxSubjects, stream)
	}
	counts, err := api.Subjects(ctx, stream, ">")
	if err != nil {
		return nil, fail(err)
	}
	return counts, nil
}

// keysFromCounts makes keys of a stream's subjects, weighted by their
// counts. The stream may hold partitioned subjects: Unmap rebuilds the
// published one; subjects of other designs are skipped.
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
		return k, inputErrorf("--from-stream %q: no messages on subjects matching %s (%d other subjects)", stream, p.Design.Subject, skipped)
	}
	return k, nil
}
