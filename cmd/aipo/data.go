package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/transforms/prompts/promptfile"
)

func init() {
	register(command{
		name:    "data convert",
		summary: "write a prompt file (a bundled benchmark by preset, or any file with a mapping) in veRL's Parquet or JSONL layout",
		// It prints to the writers it is given (its tests read them) and
		// returns the exit code.
		run: func(args []string) error {
			return exitCode(runDataConvert(context.Background(), args, os.Stdout, os.Stderr))
		},
	})
}

func runDataConvert(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("data convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	preset := fs.String("preset", "", "field mapping of the input: a prompt preset ("+strings.Join(promptfile.PresetNames(), ", ")+")")
	in := fs.String("in", "", "input file, local or gs:// (default: the preset's bundled file under --data-dir)")
	dataDir := fs.String("data-dir", "", "the shared data folder holding the bundled files (default: ../shared/data or $AIPO_SHARED_DATA)")
	dataSource := fs.String("data-source", "", "data_source written into every row (default: the preset's)")
	out := fs.String("out", "", "output file: NAME.parquet or NAME.jsonl, local or gs:// (required)")
	split := fs.String("split", "train", "extra_info.split of every row")
	ability := fs.String("ability", "math", "the ability column of every row")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aipo data convert --preset NAME [--in FILE] --out FILE.parquet|FILE.jsonl\n\n"+
			"Reads a prompt file through a preset's field mapping and writes it in the layout of veRL's\n"+
			"preprocessed datasets: data_source, prompt (one user message), ability,\n"+
			"reward_model {style: rule, ground_truth}, extra_info {split, index, id, solution, fields}.\n"+
			"The verl preset reads such a file (a user's own veRL data alike) back as is. Rows the\n"+
			"mapping rejects are written to FILE.dead.jsonl with the reason.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return report("data convert", err) // its code; the flag package has printed why
	}
	if *preset == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "aipo data convert: give --preset and --out (see --help)")
		return 2
	}
	dir := *dataDir
	if dir == "" {
		dir = shareddata.Dir()
	}
	src, err := promptfile.FromPreset(*preset, *in, dir)
	if err != nil {
		fmt.Fprintf(stderr, "aipo data convert: %v (pass --in FILE, or --data-dir with the shared data folder)\n", err)
		return 2
	}
	src.DataSource = *dataSource
	good, dead, st, err := promptfile.ReadAll(ctx, src)
	if err != nil {
		fmt.Fprintf(stderr, "aipo data convert: %v\n", err)
		return 1
	}
	if len(good) == 0 {
		fmt.Fprintf(stderr, "aipo data convert: %s holds no usable row (%d read, all dead-lettered); nothing was written\n", src.Path, st.Records)
		if len(dead) > 0 {
			fmt.Fprintf(stderr, "  first: %s\n", dead[0])
		}
		return 1
	}
	rows := make([]promptfile.VERLRow, len(good))
	for i, p := range good {
		rows[i] = promptfile.ToVERL(p, int64(i), *split, *ability)
	}
	if err := promptfile.WriteVERL(ctx, *out, rows); err != nil {
		fmt.Fprintf(stderr, "aipo data convert: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d rows from %s (preset %s)\n", *out, len(rows), src.Path, *preset)
	if len(dead) > 0 {
		dl := strings.TrimSuffix(strings.TrimSuffix(*out, ".parquet"), ".jsonl") + ".dead.jsonl"
		if err := promptfile.WriteDeadLetters(ctx, dl, dead); err != nil {
			fmt.Fprintf(stderr, "aipo data convert: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: %d rows the mapping rejected, with the reason (first: %s)\n", dl, len(dead), dead[0])
	}
	return 0
}
