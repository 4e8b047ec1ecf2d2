// Package checkpoint saves and restores a thread's user-data directory
// (SPEC §18): content-addressed checkpoints that an agent's steps can be
// undone with and a thread forked from. It is the engine only — the tools,
// the automatic checkpoints and the command line call it — and it imports
// the standard library, golang.org/x/sys and filelock, so that the
// supervisor daemon can run it inside a Pod as well as the server on the
// host (local and docker providers).
//
// # Store layout
//
// One Store is one directory, for one thread:
//
//	lock                  flock'ed for the length of every operation (and a mutex in the process)
//	packs/<sha256>.pack   the small objects (file contents below 256 KiB, trees) of one save, with an index
//	objects/ab/cdef…      the large objects, one file each, named by the SHA-256 of their bytes
//	checkpoints/<id>      one small JSON file per checkpoint: time, message, auto, counts, root tree
//	tmp/                  temporary files being written; removed under the lock when found there
//	usage                 the store's size in bytes as last counted (a hint for Prune)
//	gen                   changes whenever Prune removes objects
//
// An object is named by the SHA-256 of its bytes, wherever it lies. A pack
// is the objects back to back, then an index (hash, offset, length per
// object, sorted by hash) and a trailer (the index's offset, count and
// SHA-256); it is named by that SHA-256, so that a damaged index or
// trailer makes the whole pack refused (its objects missing), and each
// object read from it is still checked against its hash. A process reads
// the index of each pack once and keeps where every packed object lies.
//
// A tree is one directory's listing, encoded compactly (varints; per
// entry: name, type, mode, owner, size, mtime, for files and directories
// the ctime and inode of the stat cache, then the content's hash, the
// subdirectory's tree hash or the link's text). Trees are objects like
// file contents, so a checkpoint is a Merkle tree: a checkpoint that
// changed ten files writes those files and the trees of their directories
// up to the root, and shares everything else with the checkpoints before
// it; diffing two checkpoints skips every subtree whose hash is equal.
// Ids are "1", "2", ... (the highest ever plus one: the newest checkpoint
// is never pruned, so an id is never reused).
//
// # Saving
//
// Save walks the tree with openat/fstatat relative to each directory,
// never following a symlink, on one worker per processor taking
// directories from a shared stack. The previous walk is the stat cache: a
// file whose size, mtime, ctime, inode, mode and owner are unchanged is
// not read (ctime cannot be set by a process, so a forged mtime does not
// hide a change), and a directory whose ctime, mtime and inode are
// unchanged is not even listed (creating, removing or renaming an entry
// moves its directory's ctime): a save where nothing changed costs one
// fstatat per entry and one open per directory. An entry whose ctime lies
// within a second of the save's start, or which changed while it was
// read, is racy: a write in the same clock tick would leave its stat as
// it was, so the next save reads (or lists) it again whatever its stat
// says — as git does with racily clean entries. The racy paths of a walk
// are kept in memory; a store opened anew derives them from the latest
// checkpoint's recorded walk start. They are not part of the trees, so an
// entry ceasing to be racy rewrites no tree.
//
// A file is read once: small ones into memory, hashed, and handed to the
// save's pack only when the hash is new (a goroutine appends them to the
// pack's temporary file, so that reading and hashing overlap writing);
// large ones copied to a temporary object file while hashed. What is
// stored is what was hashed, even when a job writes the file meanwhile.
// FIFOs, sockets and devices are never opened (and files are opened with
// O_NONBLOCK|O_NOFOLLOW, in case one was swapped in): they are recorded as
// skipped, as are unreadable paths, and Restore leaves such paths alone. A directory's new tree goes to the
// pack as soon as its walk ends; a save that then finds nothing changed (a
// touched file) still writes its pack, whose trees the stat cache names,
// and Prune removes what no checkpoint names.
//
// A walk of the live tree that stores nothing (Changes against now,
// Restore) becomes the stat cache too, each of its trees knowing whether
// every content it names is in the store: the save after it does not read
// again what it found unchanged.
//
// # Crash safety
//
// Every file of the store is written to tmp/, fsynced, and renamed into
// place; the rename is the commit. A pack's name is the hash of its index,
// a loose object's the hash of its bytes, so either is complete or
// absent. A checkpoint is written in this order: its pack (one create,
// one fsync, one rename, however many objects) and its large objects
// (fsynced in the background while the walk goes on), then their
// directories fsynced while the checkpoint file is written and fsynced,
// then that file renamed into checkpoints/ and the directory fsynced. A
// checkpoint file therefore exists only once everything it names is
// durable: a process killed at any point leaves either the whole
// checkpoint or no checkpoint file at all, plus orphans — temporary files,
// which go at the next Open or Prune, and unreferenced objects and packs,
// which Prune removes. (With Options.NoSync the same holds for a killed
// process, not for a power cut.)
//
// Prune marks what the kept checkpoints reach, bumps gen, removes the
// dropped checkpoint files (and fsyncs their directory), and only then
// removes unmarked objects: loose ones are deleted; a pack whose objects
// are all marked stays, the marked objects of the others are copied
// (checked) to one new pack, made durable before those packs are deleted.
// At every point each checkpoint file names only objects that exist. A
// process that knew trees to be stored (and so did not check their
// objects) forgets that when it sees gen change, and forgets the packs it
// no longer finds.
//
// Every object read is checked against its hash, and every tree's names
// against path rules (one component, no "/", NUL, "." or ".."): a damaged
// or tampered store makes Restore fail with ErrCorrupt, before it changes
// anything where possible, and never makes it write outside its root.
//
// # Restoring
//
// Restore walks the live tree (with the stat cache), computes what
// differs from the checkpoint, reads and checks every object it will
// need, then changes only what differs: through directory descriptors
// opened with O_NOFOLLOW from the root down, so a symlink planted where a
// directory was is removed and replaced, never followed; each file
// written to a temporary file beside it and renamed into place, under the
// caller's per-path lock (Locker). A file in a directory that differs
// whose content the walk found to be the checkpoint's keeps its inode
// (its metadata fixed in place); when the walk could not vouch for it (a
// racy file), it is read again and compared, and rewritten only if it
// differs. RestoreOptions.SaveFirst saves the tree as it was first, so
// that a restore can be undone.
//
// Modes are kept exactly, except setuid (never) and setgid (directories
// only); owners are recorded and restored when running as root;
// modification times are restored, for symlinks too.
//
// Only Linux, macOS and FreeBSD have the engine; elsewhere Open returns
// ErrUnsupported.
package checkpoint
