package schemas

import "time"

// ManifestName is the file that commits a step (or any shard set): it is
// written last, atomically, and readers refuse a directory without it.
const ManifestName = "_MANIFEST.json"

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
