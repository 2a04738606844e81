package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/aipo-rl/aipo/learner/tokenizer"
)

func init() {
	register(command{
		name:    "tokenize",
		summary: "encode stdin to token ids (or decode ids to text) with a tokenizer",
		// It prints to the writers it is given (its tests read them) and
		// returns the exit code.
		run: func(args []string) error {
			return exitCode(runTokenize(args, os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "tokenizer.json, a directory holding one, or \"builtin\" (required)")
	decode := fs.Bool("decode", false, "read token ids (separated by spaces, commas or new lines) and print their text")
	special := fs.Bool("special", false, "encoding: turn added and special tokens written in the text (<|im_end|>) into their ids; decoding: print special tokens (they are left out otherwise)")
	pieces := fs.Bool("pieces", false, "encoding: print one line per token, \"id<TAB>vocabulary string<TAB>text\" (both quoted), instead of the ids on one line")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aipo tokenize --tokenizer FILE [--decode] [--special] [--pieces] < input\n\n"+
			"Encodes the text on stdin (as is, trailing newline included) and prints the token ids on one\n"+
			"line, space-separated. With --decode, reads ids and prints the text they stand for.\n\nFlags:\n")
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return report("tokenize", err) // its code; the flag package has printed why
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "aipo tokenize: give --tokenizer (a tokenizer.json, its directory, or builtin) and the input on stdin, no arguments\n")
		fs.Usage()
		return 2
	}
	tok, err := tokenizer.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "aipo tokenize: %v\n", err)
		return 1
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "aipo tokenize: read stdin: %v\n", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *decode {
		ids, err := parseIDs(string(in))
		if err != nil {
			fmt.Fprintf(stderr, "aipo tokenize --decode: %v\n", err)
			return 1
		}
		// Decode gives an id without a token no text (the rows a model
		// pads its LM head with); asked by hand, such an id is a mistake.
		for i, id := range ids {
			if id >= 0 && tok.TokenBytes(id) == nil {
				fmt.Fprintf(stderr, "aipo tokenize --decode: id %d (number %d of the input) is not a token of %s (%d tokens; a model that pads its vocabulary past the tokenizer's can sample such ids, which decode to no text)\n", id, i+1, *path, tok.VocabSize())
				return 1
			}
		}
		text, err := tok.Decode(ids, !*special)
		if err != nil {
			fmt.Fprintf(stderr, "aipo tokenize --decode: %v\n", err)
			return 1
		}
		w.WriteString(text)
		return 0
	}
	var ids []int
	if *special {
		ids = tok.EncodeSpecial(string(in))
	} else {
		ids = tok.Encode(string(in))
	}
	if *pieces {
		for _, id := range ids {
			s, _ := tok.TokenString(id)
			fmt.Fprintf(w, "%d\t%s\t%s\n", id, strconv.Quote(s), strconv.Quote(string(tok.TokenBytes(id))))
		}
		return 0
	}
	for i, id := range ids {
		if i > 0 {
			w.WriteByte(' ')
		}
		w.WriteString(strconv.Itoa(id))
	}
	w.WriteByte('\n')
	return 0
}

// parseIDs reads token ids separated by white space or commas; brackets
// around the list (as Python prints one) are allowed.
func parseIDs(s string) ([]int, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == '[' || r == ']' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	ids := make([]int, 0, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("input item %d %q is not a token id: give integers separated by spaces or commas", i+1, f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}
