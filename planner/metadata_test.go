package planner

import "testing"

func TestTagOf(t *testing.T) {
	p, err := New(Design{Name: "orders", Subject: "msgs.received_from.*", Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range p.Consumers {
		tag, ok := TagOf(c.Metadata)
		if !ok || tag.Design != "orders" || tag.Partition != i || tag.Partitions != 8 ||
			tag.Source != p.Mapping.Source || tag.Destination != p.Mapping.Destination {
			t.Fatalf("lane %s: tag %+v, %v", c.Durable, tag, ok)
		}
	}
	for _, meta := range []map[string]string{
		nil,
		{MetaPartition: "1", MetaPartitions: "8"},                    // no design
		{MetaDesign: "x", MetaPartition: "8", MetaPartitions: "8"},   // partition beyond the count
		{MetaDesign: "x", MetaPartition: "-1", MetaPartitions: "8"},  // negative
		{MetaDesign: "x", MetaPartition: "1", MetaPartitions: "0"},   // no partitions
		{MetaDesign: "x", MetaPartition: "one", MetaPartitions: "8"}, // not a number
	} {
		if tag, ok := TagOf(meta); ok {
			t.Fatalf("%v read as a lane: %+v", meta, tag)
		}
	}
}

// TestGenerationRecords: a record written under its key reads back by
// design and count (a design name may hold dots and "n"), other keys and
// unreadable values are skipped, and a merge only moves the retirement
// forward.
func TestGenerationRecords(t *testing.T) {
	rec := GenerationRecord{Subjects: "a.n8.*.*", StartSeq: 5, State: GenerationActive}
	meta := map[string]string{
		GenerationKey("orders", 8):       rec.String(),
		GenerationKey("eu.n2.orders", 3): GenerationRecord{RetiredSeq: 9, State: GenerationRetired}.String(),
		"lanes.generation.orders.n0":     rec.String(),
		"lanes.generation.orders.nx":     rec.String(),
		"lanes.generation.x.n4":          "not json",
		"other.key":                      "{}",
	}
	if k := GenerationKey("orders", 8); k != "lanes.generation.orders.n8" {
		t.Fatalf("key %q", k)
	}
	got := Generations(meta)
	if len(got) != 2 || got["orders"][8] != rec || !got["orders"][8].Current() || !got["eu.n2.orders"][3].Retired() || len(got["orders"]) != 1 {
		t.Fatalf("read %+v", got)
	}
	m := GenerationRecord{RetiredSeq: 9, State: GenerationRetired}.Merge(GenerationRecord{Subjects: "s", RetiredSeq: 4})
	if want := (GenerationRecord{Subjects: "s", RetiredSeq: 9, State: GenerationRetired}); m != want {
		t.Fatalf("merged %+v, want %+v", m, want)
	}
}
