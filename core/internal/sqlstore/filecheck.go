package sqlstore

import (
	"io"
	"os"
)

// A FileCheck checks what can be checked of a database file without reading its pages: its
// headers. file reads the database file as it is on disk, size is its size. It returns why the file
// is damaged, or "".
type FileCheck func(file io.ReaderAt, size int64) (damage string, err error)

// DamageError is OpenChecked's error for a file its FileCheck found damaged.
type DamageError struct{ Reason string }

func (e *DamageError) Error() string { return "damaged database file: " + e.Reason }

// checkFile runs check on the file at path, through a descriptor of its own.
func checkFile(path string, check FileCheck) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	why, err := check(f, fi.Size())
	if err == nil && why != "" {
		err = &DamageError{Reason: why}
	}
	return err
}
