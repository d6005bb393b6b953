package planner

import "strconv"

// Tag is what a lane's metadata says about it.
type Tag struct {
	Design      string
	Partition   int
	Partitions  int
	Source      string
	Destination string
}

// TagOf reads the lane metadata plan writes on every lane (see MetaDesign);
// ok is false for consumers that are not tagged as lanes, or whose partition
// figures do not make sense.
func TagOf(metadata map[string]string) (Tag, bool) {
	design, ok := metadata[MetaDesign]
	if !ok {
		return Tag{}, false
	}
	p, err1 := strconv.Atoi(metadata[MetaPartition])
	n, err2 := strconv.Atoi(metadata[MetaPartitions])
	if err1 != nil || err2 != nil || n < 1 || p < 0 || p >= n {
		return Tag{}, false
	}
	return Tag{Design: design, Partition: p, Partitions: n,
		Source: metadata[MetaSource], Destination: metadata[MetaDestination]}, true
}
