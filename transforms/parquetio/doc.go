// Package parquetio is the Beam sink and source for committed steps of
// Parquet shards: trajectories, prompts and eval records, on local disk or
// gs:// (through internal/storage, which uses Beam's filesystem registry).
//
// # Layout and commit protocol
//
// A step directory holds
//
//	<dir>/shards/part-<hash>.parquet   one zstd shard per bundle (or per MaxShardRows rows)
//	<dir>/_MANIFEST.json               written last; commits exactly the listed shards
//
// The sink (WriteTrajectories, WritePrompts, WriteEvalRecords) writes each
// bundle's rows with schemas.ShardWriter to a temporary name
// shards/.tmp-<pid>@<host>-<random>.parquet, then renames it to a name derived from its
// content (the first 128 bits of the file's sha256) and emits the file's
// schemas.ManifestFile. A single commit step, run once from an impulse with
// every ManifestFile as a side input (so that an empty input still commits a
// manifest with zero files), writes _MANIFEST.json with
// schemas.CommitManifest, after every shard is closed and renamed. It then
// deletes files in shards/ that the manifest does not list (temporaries and
// shards of failed bundle attempts), unless KeepOrphans is set.
//
// # Why the shard names are deterministic
//
// A shard's name is a function of its bytes, and its bytes are a function of
// the rows of its bundle in order (parquet-go writes no timestamps). So:
//   - a retried bundle with the same rows writes the same bytes under the
//     same name (an idempotent overwrite, atomic on local disk and on GCS);
//   - a retried bundle with different rows (the runner split it differently)
//     writes a different name, and a name is never reused for other bytes, so
//     a late write from a failed attempt can never corrupt a committed shard;
//   - only the attempts whose outputs the runner kept reach the manifest;
//     files of failed attempts are orphans that readers never open.
//
// Two bundles with identical rows would produce the same name; the commit
// step notices the repeated entry and stores the extra copies as
// part-<hash>-<n>.parquet, so no row is lost.
//
// Running the same pipeline twice over the same input gives the same names
// as long as the runner forms the same bundles (it does for prism on a fixed
// input; a distributed runner may bundle differently, which changes names but
// not correctness).
//
// # Source
//
// ReadTrajectories, ReadPrompts and ReadEvalRecords expand each step
// directory into the files its manifest lists (a directory without a
// manifest fails the pipeline with an error naming the directory and
// schemas.ErrNoManifest's text; a manifest of another kind fails too),
// reshuffle the files across workers, and read each one whole: size and
// sha256 are checked against the manifest (a mismatch is reported with the
// shard's path) before the rows are decoded in bulk and emitted.
//
// Readers never list shards/: only what the manifest names is read.
package parquetio
