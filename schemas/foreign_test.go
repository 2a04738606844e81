package schemas

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/format"
)

// foreignTrajectory has Trajectory's column names and physical types in the
// layout other writers (Arrow, Spark, DuckDB) use by default: nullable
// columns, nullable list elements, dictionary-encoded values.
type foreignTrajectory struct {
	SchemaVersion        int32      `parquet:"schema_version,optional"`
	Run                  string     `parquet:"run,optional,dict"`
	Step                 int64      `parquet:"step,optional"`
	PolicyVersion        int64      `parquet:"policy_version,optional"`
	PromptID             string     `parquet:"prompt_id,optional,dict"`
	SampleIndex          int32      `parquet:"sample_index,optional"`
	DataSource           string     `parquet:"data_source,optional"`
	PromptIDs            []*int32   `parquet:"prompt_ids,optional,list"`
	ResponseIDs          []*int32   `parquet:"response_ids,optional,list"`
	TokenSource          []*int8    `parquet:"token_source,optional,list"`
	BehaviorLogProbs     []*float32 `parquet:"behavior_logprobs,optional,list"`
	TokenPolicyVersion   []*int64   `parquet:"token_policy_version,optional,list"`
	ResponseText         string     `parquet:"response_text,optional"`
	InteractionAgent     []*string  `parquet:"interaction_agent,optional,list"`
	InteractionQuery     []*string  `parquet:"interaction_query,optional,list"`
	InteractionResult    []*string  `parquet:"interaction_result,optional,list"`
	InteractionStatus    []*string  `parquet:"interaction_status,optional,list"`
	InteractionLatencyMs []*float32 `parquet:"interaction_latency_ms,optional,list"`
	InteractionSpanStart []*int32   `parquet:"interaction_span_start,optional,list"`
	InteractionSpanEnd   []*int32   `parquet:"interaction_span_end,optional,list"`
	InteractionNoisy     []*bool    `parquet:"interaction_noisy,optional,list"`
	Reward               float32    `parquet:"reward,optional"`
	Correct              bool       `parquet:"correct,optional"`
	Advantage            float32    `parquet:"advantage,optional"`
	FinishReason         string     `parquet:"finish_reason,optional,dict"`
}

func ptrs[T any](v []T) []*T {
	if v == nil {
		return nil
	}
	out := make([]*T, len(v))
	for i := range v {
		out[i] = &v[i]
	}
	return out
}

func toForeign(t Trajectory) foreignTrajectory {
	return foreignTrajectory{
		SchemaVersion: t.SchemaVersion, Run: t.Run, Step: t.Step, PolicyVersion: t.PolicyVersion,
		PromptID: t.PromptID, SampleIndex: t.SampleIndex, DataSource: t.DataSource,
		PromptIDs: ptrs(t.PromptIDs), ResponseIDs: ptrs(t.ResponseIDs), TokenSource: ptrs(t.TokenSource),
		BehaviorLogProbs: ptrs(t.BehaviorLogProbs), TokenPolicyVersion: ptrs(t.TokenPolicyVersion), ResponseText: t.ResponseText,
		InteractionAgent: ptrs(t.InteractionAgent), InteractionQuery: ptrs(t.InteractionQuery),
		InteractionResult: ptrs(t.InteractionResult), InteractionStatus: ptrs(t.InteractionStatus),
		InteractionLatencyMs: ptrs(t.InteractionLatencyMs), InteractionSpanStart: ptrs(t.InteractionSpanStart),
		InteractionSpanEnd: ptrs(t.InteractionSpanEnd), InteractionNoisy: ptrs(t.InteractionNoisy),
		Reward: t.Reward, Correct: t.Correct, Advantage: t.Advantage, FinishReason: t.FinishReason,
	}
}

// TestBulkReaderForeignLayout writes trajectories the way other writers lay
// them out (nullable columns and elements, dictionary-encoded values, v1 data
// pages small enough that rows straddle pages, snappy) and checks that the
// bulk reader returns the same rows as parquet-go's generic reader of the
// original layout would: null scalars as zero values, null lists as empty.
func TestBulkReaderForeignLayout(t *testing.T) {
	rows := randomTrajectories(21, 400)
	rows[3].Run, rows[3].DataSource, rows[3].Step = "", "", 0 // written as nulls
	foreign := make([]foreignTrajectory, len(rows))
	for i := range rows {
		foreign[i] = toForeign(rows[i])
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[foreignTrajectory](&buf,
		parquet.DataPageVersion(1),
		parquet.PageBufferSize(2048),
		parquet.MaxRowsPerRowGroup(150),
		parquet.Compression(&snappy.Codec{}),
		parquet.DefaultEncodingFor(parquet.Int32, &parquet.RLEDictionary),
		parquet.DefaultEncodingFor(parquet.Float, &parquet.RLEDictionary),
		parquet.DefaultEncodingFor(parquet.ByteArray, &parquet.RLEDictionary),
	)
	if _, err := w.Write(foreign); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The file really has the foreign traits.
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata()
	if len(md.RowGroups) < 2 {
		t.Fatalf("want several row groups, got %d", len(md.RowGroups))
	}
	for _, cc := range md.RowGroups[0].Columns {
		if strings.Join(cc.MetaData.PathInSchema, ".") != "response_ids.list.element" {
			continue
		}
		if !slices.Contains(cc.MetaData.Encoding, format.RLEDictionary) || cc.MetaData.DictionaryPageOffset == 0 {
			t.Fatalf("response_ids is not dictionary encoded: %v", cc.MetaData.Encoding)
		}
	}
	if !f.Root().Column("run").Optional() {
		t.Fatal("run column is not optional")
	}

	got, err := ReadTrajectoriesBulk(buf.Bytes())
	if err != nil {
		t.Fatalf("bulk reader on a foreign layout: %v", err)
	}
	checkRowsEqual(t, "bulk reader, foreign layout", rows, got)
}

// trajectoryV1 is Trajectory as schema version 1 wrote it: no
// token_policy_version column.
type trajectoryV1 struct {
	SchemaVersion        int32     `parquet:"schema_version"`
	Run                  string    `parquet:"run,dict"`
	Step                 int64     `parquet:"step"`
	PolicyVersion        int64     `parquet:"policy_version"`
	PromptID             string    `parquet:"prompt_id"`
	SampleIndex          int32     `parquet:"sample_index"`
	DataSource           string    `parquet:"data_source,dict"`
	PromptIDs            []int32   `parquet:"prompt_ids,list"`
	ResponseIDs          []int32   `parquet:"response_ids,list"`
	TokenSource          []int8    `parquet:"token_source,list"`
	BehaviorLogProbs     []float32 `parquet:"behavior_logprobs,list"`
	ResponseText         string    `parquet:"response_text"`
	InteractionAgent     []string  `parquet:"interaction_agent,list"`
	InteractionQuery     []string  `parquet:"interaction_query,list"`
	InteractionResult    []string  `parquet:"interaction_result,list"`
	InteractionStatus    []string  `parquet:"interaction_status,list"`
	InteractionLatencyMs []float32 `parquet:"interaction_latency_ms,list"`
	InteractionSpanStart []int32   `parquet:"interaction_span_start,list"`
	InteractionSpanEnd   []int32   `parquet:"interaction_span_end,list"`
	InteractionNoisy     []bool    `parquet:"interaction_noisy,list"`
	Reward               float32   `parquet:"reward"`
	Correct              bool      `parquet:"correct"`
	Advantage            float32   `parquet:"advantage"`
	FinishReason         string    `parquet:"finish_reason,dict"`
}

// TestReadSchemaV1Shard reads a shard written before token_policy_version
// existed: every row reads with the column empty, validates, and
// TokenVersions gives every token the row's policy_version.
func TestReadSchemaV1Shard(t *testing.T) {
	rows := randomTrajectories(5, 60)
	old := make([]trajectoryV1, len(rows))
	for i, r := range rows {
		old[i] = trajectoryV1{SchemaVersion: 1, Run: r.Run, Step: r.Step, PolicyVersion: r.PolicyVersion, PromptID: r.PromptID,
			SampleIndex: r.SampleIndex, DataSource: r.DataSource, PromptIDs: r.PromptIDs, ResponseIDs: r.ResponseIDs,
			TokenSource: r.TokenSource, BehaviorLogProbs: r.BehaviorLogProbs, ResponseText: r.ResponseText,
			InteractionAgent: r.InteractionAgent, InteractionQuery: r.InteractionQuery, InteractionResult: r.InteractionResult,
			InteractionStatus: r.InteractionStatus, InteractionLatencyMs: r.InteractionLatencyMs,
			InteractionSpanStart: r.InteractionSpanStart, InteractionSpanEnd: r.InteractionSpanEnd, InteractionNoisy: r.InteractionNoisy,
			Reward: r.Reward, Correct: r.Correct, Advantage: r.Advantage, FinishReason: r.FinishReason}
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[trajectoryV1](&buf)
	if _, err := w.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrajectoriesBulk(buf.Bytes())
	if err != nil {
		t.Fatalf("bulk reader on a schema-1 shard: %v", err)
	}
	if len(got) != len(rows) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(rows))
	}
	for i := range got {
		g := &got[i]
		if err := g.Validate(); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if g.TokenPolicyVersion != nil {
			t.Fatalf("row %d: token_policy_version %v, want empty for a shard without the column", i, g.TokenPolicyVersion)
		}
		tv := g.TokenVersions()
		if len(tv) != len(g.ResponseIDs) {
			t.Fatalf("row %d: TokenVersions has %d entries for %d tokens", i, len(tv), len(g.ResponseIDs))
		}
		for j, v := range tv {
			if v != rows[i].PolicyVersion || g.TokenVersion(j) != v {
				t.Fatalf("row %d token %d: version %d (TokenVersion %d), want the row's %d", i, j, v, g.TokenVersion(j), rows[i].PolicyVersion)
			}
		}
	}
}
