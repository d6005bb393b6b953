package planner

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Layout is a parsed partition mapping: the publish pattern (source) and
// the partitioned subject it is rewritten to (destination). It answers
// "which partition is this subject in" exactly as the server does.
type Layout struct {
	Source      string
	Destination string
	Partitions  int
	KeyTokens   []int // 1-based positions among the source's '*' tokens

	srcTokens  []string
	wildPos    []int       // token index in the source of each '*' (wildcard i is wildPos[i-1])
	destTokens []destToken // parsed destination
}

type destKind int

const (
	destLiteral destKind = iota
	destPartition
	destWildcard
)

type destToken struct {
	kind    destKind
	literal string
	wild    int // 1-based wildcard index, for destWildcard
}

// Generation returns the token that tells partitionings apart: "n8" for
// eight partitions. Old and new lanes of a repartition never share filters.
func Generation(partitions int) string { return "n" + strconv.Itoa(partitions) }

// defaultDestination inserts the generation and the partition right after
// the subject's literal prefix, and keeps every source token after it:
// msgs.received_from.* -> msgs.received_from.n8.{{partition(8,1)}}.{{wildcard(1)}}.
func defaultDestination(source, prefix string, partitions int, keyTokens []int) string {
	toks := strings.Split(source, ".")
	first := 0
	for first < len(toks) && toks[first] != "*" {
		first++
	}
	var out []string
	if prefix != "" {
		out = append(out, prefix)
	} else {
		out = append(out, toks[:first]...)
	}
	out = append(out, Generation(partitions), partitionFunc(partitions, keyTokens))
	w := countWildcards(toks[:first])
	for _, t := range toks[first:] {
		if t == "*" {
			w++
			out = append(out, fmt.Sprintf("{{wildcard(%d)}}", w))
		} else {
			out = append(out, t)
		}
	}
	return strings.Join(out, ".")
}

func partitionFunc(n int, keyTokens []int) string {
	args := []string{strconv.Itoa(n)}
	for _, k := range keyTokens {
		args = append(args, strconv.Itoa(k))
	}
	return "{{partition(" + strings.Join(args, ",") + ")}}"
}

func countWildcards(toks []string) int {
	n := 0
	for _, t := range toks {
		if t == "*" {
			n++
		}
	}
	return n
}

// ParseLayout parses a mapping and checks that it is usable for ordered
// lanes: deterministic, exactly one whole-token partition(), and every key
// token carried into the partitioned subject so placement can be verified.
func ParseLayout(source, destination string) (*Layout, error) {
	l := &Layout{Source: source, Destination: destination, srcTokens: strings.Split(source, ".")}
	for i, t := range l.srcTokens {
		if t == "*" {
			l.wildPos = append(l.wildPos, i)
		}
	}
	if !validSubject(destination) {
		return nil, fmt.Errorf("not a valid subject")
	}
	seenWild := map[int]bool{}
	partitionTokens := 0
	for _, t := range strings.Split(destination, ".") {
		tok, err := l.parseDestToken(t)
		if err != nil {
			return nil, err
		}
		if tok.kind == destPartition {
			if partitionTokens++; partitionTokens > 1 {
				return nil, fmt.Errorf("more than one partition() token")
			}
		}
		if tok.kind == destWildcard {
			seenWild[tok.wild] = true
		}
		l.destTokens = append(l.destTokens, tok)
	}
	if l.Partitions == 0 {
		return nil, fmt.Errorf("no {{partition(n,...)}} token: there are no partitions to give lanes")
	}
	for _, k := range l.KeyTokens {
		if !seenWild[k] {
			return nil, fmt.Errorf("drops key token %d: add {{wildcard(%d)}} so each lane's messages can be checked against the key's hash", k, k)
		}
	}
	return l, nil
}

func (l *Layout) parseDestToken(t string) (destToken, error) {
	if !strings.Contains(t, "{{") {
		if t == "*" || t == ">" {
			return destToken{}, fmt.Errorf("wildcard %q in the destination: use {{wildcard(i)}}", t)
		}
		return destToken{kind: destLiteral, literal: t}, nil
	}
	if !strings.HasPrefix(t, "{{") || !strings.HasSuffix(t, "}}") {
		return destToken{}, fmt.Errorf("token %q mixes text and a mapping function; a function must be a whole token", t)
	}
	inner := strings.TrimSpace(t[2 : len(t)-2])
	open := strings.IndexByte(inner, '(')
	if open < 0 || !strings.HasSuffix(inner, ")") {
		return destToken{}, fmt.Errorf("token %q is not a mapping function call", t)
	}
	name := strings.ToLower(strings.TrimSpace(inner[:open]))
	args, err := intArgs(inner[open+1 : len(inner)-1])
	if err != nil {
		return destToken{}, fmt.Errorf("token %q: %w", t, err)
	}
	w := len(l.wildPos)
	switch name {
	case "partition":
		if len(args) == 0 {
			return destToken{}, fmt.Errorf("token %q: no partition count", t)
		}
		if err := CheckPartitions(args[0]); err != nil {
			return destToken{}, fmt.Errorf("token %q: the partition count %d: %v", t, args[0], err)
		}
		if len(args) == 1 {
			return destToken{}, fmt.Errorf("token %q: partition(n) without token positions hashes the whole subject; name the key tokens, e.g. partition(%d,1)", t, args[0])
		}
		for _, k := range args[1:] {
			if k < 1 || k > w {
				return destToken{}, fmt.Errorf("token %q: token position %d is outside 1..%d (the '*' tokens of %s)", t, k, w, l.Source)
			}
		}
		l.Partitions, l.KeyTokens = args[0], args[1:]
		return destToken{kind: destPartition}, nil
	case "wildcard":
		if len(args) != 1 || args[0] < 1 || args[0] > w {
			return destToken{}, fmt.Errorf("token %q: wildcard position must be within 1..%d", t, w)
		}
		return destToken{kind: destWildcard, wild: args[0]}, nil
	case "random":
		return destToken{}, fmt.Errorf("random() is not deterministic: the same key would land in different lanes")
	default:
		return destToken{}, fmt.Errorf("mapping function %q is not supported for lanes (only partition and wildcard)", name)
	}
}

func intArgs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, a := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(a))
		if err != nil {
			return nil, fmt.Errorf("argument %q is not a whole number", strings.TrimSpace(a))
		}
		out = append(out, v)
	}
	return out, nil
}

// subject writes the destination with literal tokens as they are and the
// partition and wildcard tokens as fill says.
func (l *Layout) subject(partition string, wildcard func(i int) string) string {
	parts := make([]string, len(l.destTokens))
	for i, t := range l.destTokens {
		switch t.kind {
		case destLiteral:
			parts[i] = t.literal
		case destPartition:
			parts[i] = partition
		case destWildcard:
			parts[i] = wildcard(t.wild)
		}
	}
	return strings.Join(parts, ".")
}

func star(int) string { return "*" }

// Filter is the consumer filter that covers exactly partition p.
func (l *Layout) Filter(p int) string { return l.subject(strconv.Itoa(p), star) }

// Pattern is the partitioned subject space with the partition as '*':
// what a stream must capture when the mapping lives in the account.
func (l *Layout) Pattern() string { return l.subject("*", star) }

// Describe shows the partitioned subject with named placeholders, for people.
func (l *Layout) Describe() string {
	return l.subject("<partition>", func(i int) string { return fmt.Sprintf("<token%d>", i) })
}

// Partition is the server's partition(): FNV-1a 32-bit over the key bytes,
// mod n. n must be within CheckPartitions' bounds.
func Partition(key []byte, n int) int {
	if n < 1 {
		return 0
	}
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return int(h % uint32(n))
}

// maxWildcards bounds the '*' tokens a subject may have, so matching needs no allocation.
const maxWildcards = 32

// span is a token's [start, end) within a subject.
type span struct{ start, end int }

// matchSource splits subject by the source pattern. It fills the wildcard
// spans and reports whether the subject matches.
func (l *Layout) matchSource(subject []byte, wild *[maxWildcards]span) bool {
	if len(l.wildPos) > maxWildcards {
		return false
	}
	tok, start, w := 0, 0, 0
	for i := 0; i <= len(subject); i++ {
		if i < len(subject) && subject[i] != '.' {
			continue
		}
		if tok >= len(l.srcTokens) || i == start {
			return false
		}
		pat := l.srcTokens[tok]
		if pat == "*" {
			if !validKeyToken(subject[start:i]) {
				return false
			}
			wild[w] = span{start, i}
			w++
		} else if string(subject[start:i]) != pat {
			return false
		}
		tok++
		start = i + 1
	}
	return tok == len(l.srcTokens)
}

func validKeyToken(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n', '\f':
			return false
		}
	}
	return !(len(b) == 1 && (b[0] == '*' || b[0] == '>'))
}

// PartitionOf returns the partition of a published subject, and false when
// the subject does not match the source pattern.
func (l *Layout) PartitionOf(subject []byte) (int, bool) {
	var wild [maxWildcards]span
	if !l.matchSource(subject, &wild) {
		return 0, false
	}
	return l.hashKey(subject, &wild), true
}

// IsBareKey reports whether s is a bare key rather than a subject: the
// source has one '*' among several tokens and s has no '.' (alice for
// msgs.received_from.*). plan --key, --keys and inspect --key accept one.
func (l *Layout) IsBareKey(s []byte) bool {
	return len(l.wildPos) == 1 && len(l.srcTokens) > 1 && bytes.IndexByte(s, '.') < 0
}

// AppendBareKey appends the subject a bare key stands for: the source with
// its '*' replaced by key.
func (l *Layout) AppendBareKey(dst, key []byte) []byte {
	for i, t := range l.srcTokens {
		if i > 0 {
			dst = append(dst, '.')
		}
		if t == "*" {
			dst = append(dst, key...)
		} else {
			dst = append(dst, t...)
		}
	}
	return dst
}

// hashKey hashes the key tokens in argument order, concatenated with no
// separator, without building the key.
func (l *Layout) hashKey(subject []byte, wild *[maxWildcards]span) int {
	h := uint32(2166136261)
	for _, k := range l.KeyTokens {
		s := wild[k-1]
		for _, c := range subject[s.start:s.end] {
			h ^= uint32(c)
			h *= 16777619
		}
	}
	return int(h % uint32(l.Partitions))
}

// Key returns the key tokens of a published subject joined by '.', for display.
func (l *Layout) Key(subject []byte) string {
	var wild [maxWildcards]span
	if !l.matchSource(subject, &wild) {
		return ""
	}
	return l.keyOf(subject, &wild)
}

func (l *Layout) keyOf(subject []byte, wild *[maxWildcards]span) string {
	if len(l.KeyTokens) == 1 {
		s := wild[l.KeyTokens[0]-1]
		return string(subject[s.start:s.end])
	}
	parts := make([]string, len(l.KeyTokens))
	for i, k := range l.KeyTokens {
		s := wild[k-1]
		parts[i] = string(subject[s.start:s.end])
	}
	return strings.Join(parts, ".")
}

// Transform returns the subject a published subject is stored under, as the
// server would rewrite it, and false when it does not match the source.
func (l *Layout) Transform(subject string) (string, bool) {
	var wild [maxWildcards]span
	b := []byte(subject)
	if !l.matchSource(b, &wild) {
		return "", false
	}
	p := l.hashKey(b, &wild)
	return l.subject(strconv.Itoa(p), func(i int) string {
		s := wild[i-1]
		return subject[s.start:s.end]
	}), true
}

// Placement is what a stored (partitioned) subject says about itself.
type Placement struct {
	Partition int  // the partition token as stored
	Expected  int  // the partition the key hashes to
	Matches   bool // the subject has the partitioned shape at all
}

// Placed reads a stored subject: which partition it is in, and which one
// its key hashes to. A mismatch means it was published around the mapping.
func (l *Layout) Placed(stored string) Placement {
	toks := strings.Split(stored, ".")
	if len(toks) != len(l.destTokens) {
		return Placement{}
	}
	var pl Placement
	keyTok := map[int]string{}
	for i, t := range l.destTokens {
		switch t.kind {
		case destLiteral:
			if toks[i] != t.literal {
				return Placement{}
			}
		case destPartition:
			p, err := strconv.Atoi(toks[i])
			if err != nil || p < 0 || strconv.Itoa(p) != toks[i] {
				return Placement{}
			}
			pl.Partition = p
		case destWildcard:
			keyTok[t.wild] = toks[i]
		}
	}
	var key []byte
	for _, k := range l.KeyTokens {
		key = append(key, keyTok[k]...)
	}
	pl.Expected = Partition(key, l.Partitions)
	pl.Matches = true
	return pl
}

// PartitionOfFilter infers the partition a consumer filter covers, for lanes
// that lanes did not create. It reports false when the filter is not exactly
// one partition of this layout.
func (l *Layout) PartitionOfFilter(filter string) (int, bool) {
	toks := strings.Split(filter, ".")
	if len(toks) != len(l.destTokens) {
		return 0, false
	}
	p := -1
	for i, t := range l.destTokens {
		switch t.kind {
		case destLiteral:
			if toks[i] != t.literal {
				return 0, false
			}
		case destPartition:
			v, err := strconv.Atoi(toks[i])
			if err != nil || v < 0 || v >= l.Partitions || strconv.Itoa(v) != toks[i] {
				return 0, false
			}
			p = v
		case destWildcard:
			if toks[i] != "*" {
				return 0, false
			}
		}
	}
	return p, p >= 0
}

// storedWildcards reads the wildcard tokens of a stored (partitioned)
// subject into wild (one per wildcard): wild[i-1] is wildcard(i), "" when
// the destination drops it. It walks the subject in place, since the
// worker reads every message's key with it.
func (l *Layout) storedWildcards(stored string, wild []string) bool {
	rest := stored
	for i, t := range l.destTokens {
		tok, more, found := strings.Cut(rest, ".")
		if found != (i < len(l.destTokens)-1) {
			return false // more or fewer tokens than the destination
		}
		switch {
		case t.kind == destLiteral && tok != t.literal:
			return false
		case t.kind == destWildcard:
			wild[t.wild-1] = tok
		}
		rest = more
	}
	return true
}

// Unmap rebuilds the published subject from a stored (partitioned) one; ok
// is false when stored does not have this layout's shape.
func (l *Layout) Unmap(stored string) (string, bool) {
	wild := make([]string, len(l.wildPos))
	if !l.storedWildcards(stored, wild) {
		return "", false
	}
	out := append([]string(nil), l.srcTokens...)
	for w, pos := range l.wildPos {
		if wild[w] == "" {
			return "", false // the destination drops this token
		}
		out[pos] = wild[w]
	}
	return strings.Join(out, "."), true
}

// StoredKey returns the key tokens of a stored (partitioned) subject joined
// by '.', and false when the subject does not have this layout's shape. It
// lets inspect name the key a stuck or misplaced message belongs to.
func (l *Layout) StoredKey(stored string) (string, bool) {
	var buf [8]string
	wild := buf[:0]
	if len(l.wildPos) > len(buf) {
		wild = make([]string, 0, len(l.wildPos))
	}
	wild = wild[:len(l.wildPos)]
	if !l.storedWildcards(stored, wild) {
		return "", false
	}
	if len(l.KeyTokens) == 1 {
		return wild[l.KeyTokens[0]-1], true
	}
	parts := make([]string, len(l.KeyTokens))
	for i, k := range l.KeyTokens {
		parts[i] = wild[k-1]
	}
	return strings.Join(parts, "."), true
}
