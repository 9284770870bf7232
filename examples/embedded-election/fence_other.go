//go:build !unix

package main

import "errors"

// appendFenced needs flock to make its check and its write one step; see fence_unix.go.
func appendFenced(string, uint64, string) error {
	return errors.New("the example's shared file needs flock (a Unix system)")
}
