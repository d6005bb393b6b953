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
