package core

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// validateName checks an object name: any valid UTF-8 string of 1 to MaxNameLen bytes, "../x", NUL
// bytes and emoji included; names never become paths (see objectID).
func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty object name", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: object name of %d bytes is over the limit of %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: object name is not valid UTF-8", ErrInvalidName)
	}
	return nil
}

// validateNamespace checks a namespace name, which becomes a directory: 1 to 64 bytes of ASCII
// letters, digits, '-' and '_', starting with a letter.
func validateNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return fmt.Errorf("%w: namespace %q must be 1 to 64 bytes", ErrInvalidName, ns)
	}
	for i, c := range []byte(ns) {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return fmt.Errorf("%w: namespace %q must start with a letter", ErrInvalidName, ns)
		}
		if !letter && !(c >= '0' && c <= '9') && c != '-' && c != '_' {
			return fmt.Errorf("%w: namespace %q may hold only letters, digits, '-' and '_'", ErrInvalidName, ns)
		}
	}
	return nil
}

// objectID is the object's stable identity: the hex of a SHA-256 of its namespace and name, cut to
// 128 bits. It names the object's database file, so no name can choose a path.
func objectID(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}
