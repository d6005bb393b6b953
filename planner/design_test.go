package planner

import (
	"strings"
	"testing"
	"time"
)

func seed() Design {
	return Design{Name: "orders", Subject: "msgs.received_from.*", Partitions: 8}
}

func TestDefaults(t *testing.T) {
	p, err := New(seed())
	if err != nil {
		t.Fatal(err)
	}
	d := p.Design
	if d.Stream.Name != "ORDERS" || d.Mapping != MappingStream || len(d.KeyTokens) != 1 || d.KeyTokens[0] != 1 {
		t.Fatalf("defaults: %+v", d)
	}
	c := p.Consumers[3]
	if c.Durable != "orders-n8-03" || c.FilterSubject != "msgs.received_from.n8.3.*" || c.AckPolicy != "explicit" ||
		c.MaxAckPending != 1 || c.AckWait != 30*time.Second || c.MaxDeliver != -1 || c.DeliverPolicy != "all" {
		t.Fatalf("lane 3: %+v", c)
	}
	if c.Metadata[MetaDesign] != "orders" || c.Metadata[MetaPartition] != "3" || c.Metadata[MetaPartitions] != "8" {
		t.Fatalf("lane metadata: %v", c.Metadata)
	}
	if p.Stream.MaxConsumers != 1000 || p.Stream.SubjectTransform.Destination != "msgs.received_from.n8.{{partition(8,1)}}.{{wildcard(1)}}" {
		t.Fatalf("stream: %+v", p.Stream)
	}
	if len(p.Warnings) != 0 {
		t.Fatalf("seed design warns: %v", p.Warnings)
	}
}

func TestNameDerivation(t *testing.T) {
	p, err := New(Design{Stream: StreamSettings{Name: "ORDERS"}, Subject: "a.*"})
	if err != nil || p.Design.Name != "orders" || p.Design.Partitions != DefaultPartitions {
		t.Fatalf("name from stream: %v %+v", err, p)
	}
	p, err = New(Design{Name: "user-events", Subject: "a.*"})
	if err != nil || p.Design.Stream.Name != "USER_EVENTS" {
		t.Fatalf("stream from name: %v %+v", err, p)
	}
	// Neither: from the subject's literal tokens before the first '*'.
	for subject, want := range map[string][2]string{
		"orders.*":             {"orders", "ORDERS"},
		"msgs.received_from.*": {"msgs-received_from", "MSGS_RECEIVED_FROM"},
		"Dev.Events.*.x.*":     {"dev-events", "DEV_EVENTS"},
		"a.*.b.*":              {"a", "A"},
	} {
		p, err = New(Design{Subject: subject})
		if err != nil {
			t.Errorf("%s: %v", subject, err)
		} else if p.Design.Name != want[0] || p.Design.Stream.Name != want[1] {
			t.Errorf("%s: name %q, stream %q, want %v", subject, p.Design.Name, p.Design.Stream.Name, want)
		}
	}
	// No literal token to name it after, or one no name can hold.
	for _, subject := range []string{"*.events", "a/b.*", strings.Repeat("x", 70) + ".*"} {
		_, err = New(Design{Subject: subject})
		if err == nil || !strings.Contains(err.Error(), "name: required") || !strings.Contains(err.Error(), "--name") {
			t.Errorf("%s: %v, want name: required naming --name", subject, err)
		}
	}
}

func TestMaxConsumersCoversRepartition(t *testing.T) {
	d := seed()
	d.Partitions = 1024
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	if p.Stream.MaxConsumers != 2048 {
		t.Fatalf("max_consumers %d, want room for old and new lanes (2048)", p.Stream.MaxConsumers)
	}
	if p.Lanes[7].Name != "orders-n1024-0007" {
		t.Fatalf("zero padding: %s", p.Lanes[7].Name)
	}
}

func TestAccountModeStreamCapturesPartitionedSubjects(t *testing.T) {
	d := seed()
	d.Mapping = MappingAccount
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	if p.Stream.SubjectTransform != nil || len(p.Stream.Subjects) != 1 || p.Stream.Subjects[0] != "msgs.received_from.n8.*.*" {
		t.Fatalf("account-mode stream: %+v", p.Stream)
	}
}

func TestPinnedAndBackoff(t *testing.T) {
	d := seed()
	d.Lane.Pinned = true
	d.Lane.BackOff = []Duration{Duration(time.Second), Duration(5 * time.Second)}
	d.Lane.MaxDeliver = 5
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Consumers[0]
	if c.PriorityPolicy != "pinned_client" || c.PriorityTimeout != DefaultPinnedTTL || c.PriorityGroups[0] != PinnedGroup {
		t.Fatalf("pinned: %+v", c)
	}
	if c.AckWait != time.Second || len(c.BackOff) != 2 {
		t.Fatalf("backoff sets the ack wait to its first step: %+v", c)
	}
}

func TestWarnings(t *testing.T) {
	d := seed()
	d.Lane.MaxAckPending = 4
	p, err := New(d)
	if err != nil || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "not guaranteed") {
		t.Fatalf("max ack pending > 1 must warn: %v %v", err, p)
	}
	p, err = New(Design{Name: "dev", Subject: "dev.*.*", Partitions: 4})
	if err != nil || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "ab+c") {
		t.Fatalf("multi-token key must warn about concatenation: %v %v", err, p)
	}
}

// TestBadDesigns: every bad design gets one error naming the field, the
// value, and where it came from.
func TestBadDesigns(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(*Design)
		origin string
		want   []string
	}{
		{"partitions zero", func(d *Design) { d.Partitions = 0; d.SetOrigin("partitions", "--partitions") }, "--partitions", []string{"partitions", `"0"`, "at least 1"}},
		{"partitions negative", func(d *Design) { d.Partitions = -3 }, "", []string{"partitions", `"-3"`}},
		{"partitions absurd", func(d *Design) { d.Partitions = 1_000_000 }, "", []string{"partitions", "1000000", "16384"}},
		{"key token zero", func(d *Design) { d.KeyTokens = []int{0} }, "", []string{"key_tokens", `"0"`, "1-based"}},
		{"key token beyond", func(d *Design) { d.KeyTokens = []int{2} }, "", []string{"key_tokens", `"2"`, "only 1"}},
		{"key token twice", func(d *Design) { d.Subject = "a.*.*"; d.KeyTokens = []int{1, 1} }, "", []string{"key_tokens", "twice"}},
		{"gt as key", func(d *Design) { d.Subject = "msgs.>"; d.KeyTokens = []int{1} }, "", []string{"subject", "'>'"}},
		{"invalid subject", func(d *Design) { d.Subject = "msgs..x.*" }, "", []string{"subject", "not a valid"}},
		{"space in subject", func(d *Design) { d.Subject = "msgs x.*" }, "", []string{"subject"}},
		{"no wildcard", func(d *Design) { d.Subject = "msgs.received" }, "", []string{"subject", "no '*'"}},
		{"mixed wildcard", func(d *Design) { d.Subject = "msgs.a*" }, "", []string{"subject", "whole token"}},
		{"missing subject", func(d *Design) { d.Subject = "" }, "", []string{"subject", "required"}},
		{"bad stream name", func(d *Design) { d.Stream.Name = "ORD.ERS" }, "", []string{"stream.name", "ORD.ERS"}},
		{"bad design name", func(d *Design) { d.Name = "my orders" }, "", []string{"name", "my orders"}},
		{"zero ack wait", func(d *Design) { d.SetOrigin("lane.ack_wait", "lanes.yaml:9") }, "lanes.yaml:9", []string{"lane.ack_wait", "positive"}},
		{"negative ack wait", func(d *Design) { d.Lane.AckWait = Duration(-time.Second); d.SetOrigin("lane.ack_wait", "--ack-wait") }, "--ack-wait", []string{"lane.ack_wait", "-1s"}},
		{"zero pinned ttl", func(d *Design) { d.Lane.Pinned = true; d.SetOrigin("lane.pinned_ttl", "--pinned-ttl") }, "--pinned-ttl", []string{"lane.pinned_ttl", "positive"}},
		{"negative backoff", func(d *Design) { d.Lane.BackOff = []Duration{Duration(-time.Second)} }, "", []string{"lane.backoff", "positive"}},
		{"max ack pending zero", func(d *Design) { d.SetOrigin("lane.max_ack_pending", "--max-ack-pending") }, "--max-ack-pending", []string{"lane.max_ack_pending", "at least 1"}},
		{"max deliver zero", func(d *Design) { d.SetOrigin("lane.max_deliver", "--max-deliver") }, "--max-deliver", []string{"lane.max_deliver"}},
		{"backoff beyond max deliver", func(d *Design) {
			d.Lane.MaxDeliver = 1
			d.Lane.BackOff = []Duration{Duration(time.Second), Duration(2 * time.Second)}
		}, "", []string{"lane.backoff", "max_deliver"}},
		{"ack wait vs backoff", func(d *Design) {
			d.Lane.AckWait = Duration(time.Minute)
			d.SetOrigin("lane.ack_wait", "--ack-wait")
			d.Lane.BackOff = []Duration{Duration(time.Second)}
		}, "--ack-wait", []string{"lane.ack_wait", "backoff[0]"}},
		{"bad mapping", func(d *Design) { d.Mapping = "global" }, "", []string{"mapping", "global"}},
		{"random mapping", func(d *Design) { d.Destination = "msgs.{{random(8)}}.{{wildcard(1)}}" }, "", []string{"destination", "random() is not deterministic"}},
		{"partition zero index", func(d *Design) { d.Destination = "msgs.{{partition(8,0)}}.{{wildcard(1)}}" }, "", []string{"destination", "position 0"}},
		{"partition without key", func(d *Design) { d.Destination = "msgs.{{partition(8)}}.{{wildcard(1)}}" }, "", []string{"destination", "whole subject"}},
		{"partition in text", func(d *Design) { d.Destination = "msgs.p{{partition(8,1)}}.{{wildcard(1)}}" }, "", []string{"destination", "whole token"}},
		{"destination drops key", func(d *Design) { d.Destination = "msgs.{{partition(8,1)}}" }, "", []string{"destination", "drops key token 1"}},
		{"destination disagrees", func(d *Design) {
			d.Destination = "msgs.{{partition(4,1)}}.{{wildcard(1)}}"
			d.SetOrigin("partitions", "--partitions")
		}, "--partitions", []string{"partitions", "partition(4"}},
		{"max consumers below lanes", func(d *Design) { d.Stream.MaxConsumers = 4 }, "", []string{"stream.max_consumers", "below the 8 lanes"}},
		{"bad storage", func(d *Design) { d.Stream.Storage = "disk" }, "", []string{"stream.storage", "disk"}},
		{"bad retention", func(d *Design) { d.Stream.Retention = "forever" }, "", []string{"stream.retention"}},
		{"bad replicas", func(d *Design) { d.Stream.Replicas = 7 }, "", []string{"stream.replicas", "7"}},
		{"pinned ttl without pinned", func(d *Design) { d.Lane.PinnedTTL = Duration(time.Second); d.SetOrigin("lane.pinned_ttl", "x") }, "x", []string{"lane.pinned_ttl", "pinned is false"}},
		{"prefix wildcard", func(d *Design) { d.Prefix = "a.*" }, "", []string{"prefix"}},
		{"keys in flight zero", func(d *Design) { d.SetOrigin("lane.keys_in_flight", "--keys-in-flight") }, "--keys-in-flight", []string{"lane.keys_in_flight", `"0"`, "between 1"}},
		{"keys in flight absurd", func(d *Design) { d.Lane.KeysInFlight = 5000 }, "", []string{"lane.keys_in_flight", "5000", "1024"}},
		{"keys in flight beside max ack pending", func(d *Design) {
			d.Lane.KeysInFlight, d.Lane.MaxAckPending = 8, 4
			d.SetOrigin("lane.max_ack_pending", "lanes.yaml:7")
		}, "lanes.yaml:7", []string{"lane.max_ack_pending", "keys_in_flight (8)"}},
		{"keys in flight unpinned", func(d *Design) {
			d.Lane.KeysInFlight = 8
			d.SetOrigin("lane.pinned", "--pinned")
		}, "--pinned", []string{"lane.pinned", "keys_in_flight above 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := seed()
			tc.edit(&d)
			_, err := New(d)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error %q does not mention %q", msg, w)
				}
			}
			if tc.origin != "" && !strings.HasPrefix(msg, tc.origin+": ") {
				t.Fatalf("error %q does not start with its origin %q", msg, tc.origin)
			}
		})
	}
}

// keys_in_flight K above 1 makes every lane a pinned lane with max ack
// pending K, tagged with K; 1 (the default) leaves the lane as it was.
func TestKeysInFlight(t *testing.T) {
	serial, err := New(seed())
	if err != nil {
		t.Fatal(err)
	}
	d := seed()
	d.Lane.KeysInFlight = 32
	d.Lane.MaxAckPending = 32
	d.SetOrigin("lane.max_ack_pending", "--max-ack-pending") // the same value is allowed
	keyed, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	s, k := serial.Consumers[3], keyed.Consumers[3]
	if s.MaxAckPending != 1 || s.PriorityPolicy != "" || s.Metadata[MetaKeysInFlight] != "" {
		t.Errorf("serial lane %+v", s)
	}
	if k.MaxAckPending != 32 || k.PriorityPolicy != "pinned_client" || len(k.PriorityGroups) != 1 || k.Metadata[MetaKeysInFlight] != "32" {
		t.Errorf("key-parallel lane %+v", k)
	}
	if tag, ok := TagOf(k.Metadata); !ok || tag.KeysInFlight != 32 {
		t.Errorf("tag %+v %v", tag, ok)
	}
	if tag, ok := TagOf(s.Metadata); !ok || tag.KeysInFlight != 1 {
		t.Errorf("serial tag %+v %v", tag, ok)
	}
	for _, w := range keyed.Warnings {
		if strings.Contains(w, "max_ack_pending") {
			t.Errorf("a key-parallel lane keeps order, yet: %s", w)
		}
	}
}

func TestNormalizeDoesNotAlias(t *testing.T) {
	d := seed()
	d.KeyTokens = []int{1}
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	p.Design.KeyTokens[0] = 9
	if d.KeyTokens[0] != 1 {
		t.Fatal("planning must not share slices with the input design")
	}
}
