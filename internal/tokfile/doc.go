// Package tokfile reads and writes the token-id files that language-model training reads:
// a whole corpus split as one stream of uint16 token ids.
//
// # Format
//
// A file is a 16-byte header followed by the ids:
//
//	offset 0   8 bytes   magic "bdids001" (ASCII)
//	offset 8   uint32 LE vocabulary size (at most 65536)
//	offset 12  uint32 LE reserved, 0
//	offset 16  uint16 LE token ids, each below the vocabulary size
//
// Each document is written as BOS, its tokens, EOS, and documents follow one another in
// corpus order, so a reader can cut documents at BOS or train on the stream as it is.
package tokfile
