// Package faultfs is a fault-injecting pass-through file system, mounted with FUSE, that can
// lose power.
//
// An FS mounts a backing directory at a mount point. Every operation passes through to the
// backing directory at once, so that programs see their own writes, but the FS remembers what
// a power cut would undo: for each file, the content and size it had at its last fsync or
// fdatasync (the first write to a page after a sync saves that page's old content); for each
// directory, the creates, removes and renames made in it since its last fsync (a removed or
// replaced file is kept aside, not deleted, until that fsync). PowerCut undoes all of it, as if
// the machine had lost power: files return to their synced content, and directory entries not
// made durable by an fsync of their directory come back or go away. A rename waits for both of
// its directories; a create needs the fsync of its directory even if the file itself was
// fsynced. Nothing is really fsynced on the backing file system: durability is simulated, so
// fsync costs nothing unless a delay is set.
//
// The FS can also fail: fsync (or write) with EIO, in which case the pages it was to make
// durable stay lost even after a later fsync succeeds (as Linux forgets dirty pages whose
// writeback failed), writes that need new space, creates and fallocate with ENOSPC, and fsync
// can be made slow.
//
// The model is the pessimistic one of POSIX, not that of a particular file system: ext4 in
// its default mode would often keep more. Hard links, device nodes and O_TMPFILE are refused.
package faultfs
