package schemas

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aipo-rl/aipo/internal/rundir"
	"github.com/aipo-rl/aipo/internal/storage"
)

// Manifest commits a set of Parquet shards. Paths are relative to the
// directory that holds the manifest.
type Manifest struct {
	SchemaVersion int            `json:"schema_version"`
	Kind          string         `json:"kind"` // "trajectories", "prompts", "eval"
	Run           string         `json:"run,omitempty"`
	Step          int64          `json:"step"`
	PolicyVersion int64          `json:"policy_version"`
	CreatedAt     time.Time      `json:"created_at"`
	Rows          int64          `json:"rows"`  // sum of Files[i].Rows
	Bytes         int64          `json:"bytes"` // sum of Files[i].Bytes
	Files         []ManifestFile `json:"files"`
	// Meta holds free-form facts about the step (config hash, seed, ...).
	Meta map[string]string `json:"meta,omitempty"`
}

// ManifestFile is one committed shard.
type ManifestFile struct {
	Path   string `json:"path"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// File is f as the run directory's commit protocol lists a file.
func (f ManifestFile) File() rundir.File {
	return rundir.File{Path: f.Path, Bytes: f.Bytes, SHA256: f.SHA256}
}

// ErrNoManifest is returned (wrapped) when a directory has no manifest: its
// writer has not committed it, or was killed before it could.
// It is a rundir.ErrNotCommitted.
var ErrNoManifest = rundir.NotCommitted("no " + rundir.ManifestName + " (the step is not committed: its writer is still running or was killed; rerun the writer)")

// ParseManifest decodes and validates a manifest.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := rundir.DecodeMarker(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	return m, m.Validate()
}

// Validate checks the manifest's internal consistency.
func (m *Manifest) Validate() error {
	if m.SchemaVersion < 1 || m.SchemaVersion > SchemaVersion {
		return fmt.Errorf("manifest: schema_version %d not supported (this build reads 1..%d; upgrade aipo)", m.SchemaVersion, SchemaVersion)
	}
	switch m.Kind {
	case "trajectories", "prompts", "eval":
	default:
		return fmt.Errorf("manifest: unknown kind %q (want trajectories, prompts or eval)", m.Kind)
	}
	var rows, size int64
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		if f.Path == "" || strings.HasPrefix(f.Path, "/") || strings.Contains(f.Path, "..") || strings.Contains(f.Path, "://") {
			return fmt.Errorf("manifest: files[%d].path %q must be a relative path inside the step", i, f.Path)
		}
		if seen[f.Path] {
			return fmt.Errorf("manifest: files[%d].path %q listed twice", i, f.Path)
		}
		seen[f.Path] = true
		if f.Rows < 0 || f.Bytes < 0 {
			return fmt.Errorf("manifest: files[%d] (%s) has negative rows or bytes", i, f.Path)
		}
		if len(f.SHA256) != 64 {
			return fmt.Errorf("manifest: files[%d] (%s) sha256 %q is not 64 hex digits", i, f.Path, f.SHA256)
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil {
			return fmt.Errorf("manifest: files[%d] (%s) sha256 is not hex", i, f.Path)
		}
		rows += f.Rows
		size += f.Bytes
	}
	if rows != m.Rows || size != m.Bytes {
		return fmt.Errorf("manifest: totals (rows %d, bytes %d) disagree with its files (rows %d, bytes %d)", m.Rows, m.Bytes, rows, size)
	}
	return nil
}

// CommitManifest writes dir/_MANIFEST.json atomically and only if absent,
// committing the files it lists. Call it only after every listed file is
// closed. It fills in the totals, the schema version and the creation time,
// and sorts the files. An existing manifest is never replaced: committing
// the same manifest again succeeds, a different one fails with an error
// wrapping ErrCommittedElsewhere.
func CommitManifest(ctx context.Context, dir string, m Manifest) error {
	if m.SchemaVersion == 0 {
		m.SchemaVersion = SchemaVersion
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now().UTC()
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	m.Rows, m.Bytes = 0, 0
	for _, f := range m.Files {
		m.Rows += f.Rows
		m.Bytes += f.Bytes
	}
	if m.Files == nil {
		m.Files = []ManifestFile{}
	}
	if err := m.Validate(); err != nil {
		return err
	}
	p := rundir.Manifest(dir)
	err := rundir.WriteMarker(ctx, p, m)
	if !errors.Is(err, storage.ErrExist) {
		return err
	}
	// A manifest is never replaced. The same one again (a retried commit
	// bundle) is success; a different one is another writer's commit.
	old, rerr := ReadManifest(ctx, dir)
	if rerr != nil {
		return fmt.Errorf("%s exists and cannot be read (%v); nothing was overwritten: %w", p, rerr, ErrCommittedElsewhere)
	}
	if sameCommit(old, m) {
		return nil
	}
	return fmt.Errorf("%s: %w", p, ErrCommittedElsewhere)
}

// ErrCommittedElsewhere is returned (wrapped) by CommitManifest when the
// directory already holds a different manifest: another writer committed
// the step first. Nothing is overwritten, and the caller deletes nothing.
var ErrCommittedElsewhere = errors.New("the step is already committed with a different manifest (another writer committed it first); this attempt's manifest was not written and nothing was overwritten. " +
	"If the other writer is wrong, remove the step directory and run again")

// sameCommit reports whether two manifests commit the same thing: equal in
// every field but the creation time.
func sameCommit(a, b Manifest) bool {
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// Uncommit removes dir's manifest, so that the step can be written again
// (aipo rollout --force). The shards stay until the next commit replaces
// them.
func Uncommit(ctx context.Context, dir string) error {
	return storage.Remove(ctx, rundir.Manifest(dir))
}

// ReadManifest reads and validates dir/_MANIFEST.json. A missing manifest is
// an error wrapping ErrNoManifest that names the directory.
func ReadManifest(ctx context.Context, dir string) (Manifest, error) {
	p := rundir.Manifest(dir)
	b, err := storage.ReadFile(ctx, p)
	if err != nil {
		if errors.Is(err, storage.ErrNotExist) {
			return Manifest{}, fmt.Errorf("%s: %w", dir, ErrNoManifest)
		}
		return Manifest{}, fmt.Errorf("read %s: %w", p, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

// VerifyFile checks one committed file's size and sha256 against its entry
// and returns its bytes (so that the caller parses what it verified). A
// mismatch is a *ChecksumError naming the file.
func VerifyFile(ctx context.Context, dir string, f ManifestFile) ([]byte, error) {
	return rundir.VerifyFile(ctx, dir, f.File(), rundir.ManifestName)
}
