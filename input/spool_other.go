//go:build !linux

package input

import (
	"errors"
	"os"
)

func openTmpfile(string) (*os.File, error) { return nil, errors.ErrUnsupported }
