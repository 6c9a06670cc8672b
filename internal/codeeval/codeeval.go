// Package codeeval measures generated Go code: it makes prompts of documented functions (the
// package clause, the doc comment and the signature) and judges a generated body by whether
// it closes the function and whether go/parser accepts the result.
package codeeval

import (
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
)

// File is a Go source file.
type File struct {
	Path string
	Data []byte
}

// Prompt asks for one function's body.
type Prompt struct {
	// Path and Name say where the function comes from, for reports.
	Path, Name string
	// Text is the package clause, the function's doc comment and its signature up to and
	// including the body's opening brace and newline.
	Text string
	// Body is the file's own body after Text, through the closing brace.
	Body string
}

// PromptOptions bound which functions make prompts.
type PromptOptions struct {
	// MinLines and MaxLines bound the body's length in lines (defaults 3 and 40).
	MinLines, MaxLines int
	// MaxPromptBytes bounds the prompt's length (default 600).
	MaxPromptBytes int
}

// Prompts returns up to max prompts from the files, in the files' order, spread evenly over
// every function that qualifies: a top-level function or method with a doc comment and a
// body within the options' bounds. Files that do not parse are skipped.
func Prompts(files []File, max int, opts PromptOptions) []Prompt {
	if opts.MinLines == 0 {
		opts.MinLines = 3
	}
	if opts.MaxLines == 0 {
		opts.MaxLines = 40
	}
	if opts.MaxPromptBytes == 0 {
		opts.MaxPromptBytes = 600
	}
	var all []Prompt
	for _, f := range files {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f.Path, f.Data, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		clause := "package " + file.Name.Name + "\n\n"
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Doc == nil || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.Body.Rbrace).Line - fset.Position(fn.Body.Lbrace).Line
			if lines < opts.MinLines || lines > opts.MaxLines {
				continue
			}
			start := fset.Position(fn.Doc.Pos()).Offset
			open := fset.Position(fn.Body.Lbrace).Offset
			end := fset.Position(fn.Body.Rbrace).Offset
			if open+1 >= len(f.Data) || f.Data[open+1] != '\n' {
				continue // a body on the brace's line: no clean cut
			}
			text := clause + string(f.Data[start:open+2])
			if len(text) > opts.MaxPromptBytes {
				continue
			}
			all = append(all, Prompt{Path: f.Path, Name: fn.Name.Name, Text: text, Body: string(f.Data[open+2 : end+1])})
		}
	}
	if max <= 0 || len(all) <= max {
		return all
	}
	out := make([]Prompt, 0, max)
	for i := range max {
		out = append(out, all[i*len(all)/max])
	}
	return out
}

// Verdict judges one generated continuation of a prompt.
type Verdict struct {
	// Closed reports whether the continuation closes the prompt's function.
	Closed bool
	// Body is the continuation through the closing brace (all of it when not closed).
	Body string
	// Parses reports whether go/parser accepts the prompt and Body as a file; only a
	// closed body can.
	Parses bool
}

// Judge cuts a generated continuation of a prompt (whose text ends inside the function's
// body, at depth one) at the brace that closes the function, and parses the result.
func Judge(prompt, generated string) Verdict {
	fset := token.NewFileSet()
	src := []byte(generated)
	var s scanner.Scanner
	s.Init(fset.AddFile("", -1, len(src)), src, func(token.Position, string) {}, scanner.ScanComments)
	depth := 1
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return Verdict{Body: generated}
		}
		switch tok {
		case token.LBRACE:
			depth++
		case token.RBRACE:
			depth--
		}
		if depth == 0 {
			end := fset.Position(pos).Offset + 1
			body := generated[:end]
			_, err := parser.ParseFile(token.NewFileSet(), "", prompt+body+"\n", parser.SkipObjectResolution)
			return Verdict{Closed: true, Body: body, Parses: err == nil}
		}
	}
}

// Agreement is the number of leading tokens two sequences share, counted over at most n.
func Agreement(a, b []int, n int) int {
	k := 0
	for k < n && k < len(a) && k < len(b) && a[k] == b[k] {
		k++
	}
	return k
}

// Tally accumulates verdicts.
type Tally struct {
	Prompts, Closed, Parsed int
}

// Add counts one verdict.
func (t *Tally) Add(v Verdict) {
	t.Prompts++
	if v.Closed {
		t.Closed++
	}
	if v.Parses {
		t.Parsed++
	}
}

// ParseRate is the fraction of closed functions that parse (0 when none closed).
func (t Tally) ParseRate() float64 {
	if t.Closed == 0 {
		return 0
	}
	return float64(t.Parsed) / float64(t.Closed)
}
