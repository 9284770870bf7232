//go:build !unix

package cluster

import "os"

// tryLock does nothing where flock is missing: the data directory is not protected there.
func tryLock(*os.File) error { return nil }
