// Package gocorpus reads the Go toolchain's own source as a training corpus for language
// models: about 47 MB of hand-written Go that every machine with the go1.27.3 toolchain in
// its module cache holds byte for byte.
//
// # Files
//
// Load walks the src directory of a toolchain module (see DefaultRoot) and keeps a file when
// all of these hold, in this order:
//
//   - its name ends in ".go" and it is a regular file;
//   - no directory on its path is named "testdata" or "vendor";
//   - it is at most MaxFileBytes long;
//   - it is valid UTF-8 without NUL bytes (no binaries);
//   - it has no line matching `^// Code generated .* DO NOT EDIT\.$` (generated code);
//   - none of its lines is longer than MaxLineBytes (embedded blobs and tables);
//   - numeric literals make up at most MaxNumericFraction of its bytes other than white
//     space and commas (tables of constants);
//   - its content differs from every file kept before it (deduplicated by SHA-256).
//
// Files are visited in the order of their slash-separated paths relative to src, so the
// list, the choice among duplicates and everything derived from them are the same on
// every machine.
//
// # Splits
//
// Whole directories go to one split, chosen by a fixed hash of the directory's path
// relative to src (see SplitOf): about 5 % of the directories are held out for the final
// evaluation, about 2.5 % more are the validation split, and the rest are for training;
// directories over MaxEvalDirBytes always train. Splitting by directory keeps a package's files together, so the held-out files are not
// near copies of training files from the same package.
package gocorpus
