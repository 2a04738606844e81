#!/usr/bin/env node
// Reads the trajectory shards of one step directory with DuckDB, an
// independent Parquet reader, and prints what it sees as one JSON object:
//
//   node scripts/interop/duckdb-check.mjs runs/demo/step-000007
//   {"rows":512,"files":{"part-00000.parquet":256,...},
//    "token_source_mismatch":0,"logprobs_mismatch":0,"token_version_mismatch":0,
//    "token_versions":{"6":70211,"7":1830},
//    "interaction_mismatch":0,"span_outside":0}
//
// rows: all rows of <dir>/shards/*.parquet; files: rows per shard;
// token_source_mismatch: rows where len(token_source) != len(response_ids);
// logprobs_mismatch: rows where len(behavior_logprobs) != len(response_ids);
// token_version_mismatch: rows whose token_policy_version is neither empty
// nor one entry per response token, or whose oldest policy token's version
// is not policy_version; token_versions: tokens per version over all rows;
// interaction_mismatch: rows whose interaction_* lists differ in length;
// span_outside: interactions whose [start, end) span leaves the response.
// Exits 2 on bad usage and 1 when DuckDB fails.
import path from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node duckdb-check.mjs <step dir> (reads <dir>/shards/*.parquet)');
  process.exit(2);
}
const glob = path.join(dir, 'shards', '*.parquet');

const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
try {
  const totals = await conn.runAndReadAll(
    `SELECT
       count(*) AS rows,
       count(*) FILTER (WHERE len(token_source) != len(response_ids)) AS token_source_mismatch,
       count(*) FILTER (WHERE len(behavior_logprobs) != len(response_ids)) AS logprobs_mismatch,
       count(*) FILTER (WHERE (len(token_policy_version) != 0 AND len(token_policy_version) != len(response_ids))
                           OR (len(token_policy_version) != 0
                               AND list_min(list_filter(list_zip(token_policy_version, token_source), x -> x[2] = 0).apply(x -> x[1])) != policy_version)) AS token_version_mismatch,
       count(*) FILTER (WHERE len(interaction_query) != len(interaction_agent)
                           OR len(interaction_result) != len(interaction_agent)
                           OR len(interaction_status) != len(interaction_agent)
                           OR len(interaction_latency_ms) != len(interaction_agent)
                           OR len(interaction_span_start) != len(interaction_agent)
                           OR len(interaction_span_end) != len(interaction_agent)
                           OR len(interaction_noisy) != len(interaction_agent)) AS interaction_mismatch
     FROM read_parquet($1)`,
    [glob],
  );
  // Parallel unnests pair each span's start with its end.
  const spans = await conn.runAndReadAll(
    `SELECT count(*) AS span_outside FROM (
       SELECT unnest(interaction_span_start) AS a, unnest(interaction_span_end) AS b, len(response_ids) AS n
       FROM read_parquet($1))
     WHERE a < 0 OR a > b OR b > n`,
    [glob],
  );
  // Tokens per version: the per-token column where a row has it, the
  // row's policy_version for every token where it does not.
  const versions = await conn.runAndReadAll(
    `SELECT v, count(*) AS tokens FROM (
       SELECT unnest(CASE WHEN len(token_policy_version) = 0
                          THEN list_transform(response_ids, x -> policy_version)
                          ELSE token_policy_version END) AS v
       FROM read_parquet($1))
     GROUP BY v ORDER BY v`,
    [glob],
  );
  const perFile = await conn.runAndReadAll(
    `SELECT filename, count(*) AS rows FROM read_parquet($1, filename = true) GROUP BY filename ORDER BY filename`,
    [glob],
  );
  const t = totals.getRowObjectsJS()[0];
  const out = {
    rows: Number(t.rows),
    files: {},
    token_source_mismatch: Number(t.token_source_mismatch),
    logprobs_mismatch: Number(t.logprobs_mismatch),
    token_version_mismatch: Number(t.token_version_mismatch),
    token_versions: {},
    interaction_mismatch: Number(t.interaction_mismatch),
    span_outside: Number(spans.getRowObjectsJS()[0].span_outside),
  };
  for (const r of versions.getRowObjectsJS()) {
    out.token_versions[String(r.v)] = Number(r.tokens);
  }
  for (const r of perFile.getRowObjectsJS()) {
    out.files[path.basename(r.filename)] = Number(r.rows);
  }
  console.log(JSON.stringify(out));
} catch (err) {
  console.error(`duckdb-check: reading ${glob}: ${err.message}`);
  process.exitCode = 1;
} finally {
  conn.closeSync();
  instance.closeSync();
}
