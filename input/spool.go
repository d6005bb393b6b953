package input

import (
	"os"
)

// Spool is an anonymous temporary file for reading back what was read
// once. It has no name in the temporary directory (Linux O_TMPFILE), or
// loses it right after it is created elsewhere, so nothing of it is left
// on disk however the process ends, SIGKILL included. Where an open file
// cannot be unlinked (Windows), Close removes it.
type Spool struct {
	*os.File
	named string // still to remove on Close
}

// NewSpool creates a spool in the temporary directory.
func NewSpool() (*Spool, error) {
	if f, err := openTmpfile(os.TempDir()); err == nil {
		return &Spool{File: f}, nil
	}
	f, err := os.CreateTemp("", "lanes-spool-*")
	if err != nil {
		return nil, err
	}
	s := &Spool{File: f}
	if err := os.Remove(f.Name()); err != nil {
		s.named = f.Name()
	}
	return s, nil
}

// Close closes the file and removes it if it still has a name.
func (s *Spool) Close() error {
	err := s.File.Close()
	if s.named != "" {
		os.Remove(s.named)
		s.named = ""
	}
	return err
}
