// Package jinjaguard renders Jinja chat templates taken from untrusted model folders
// without letting them crash, hang or exhaust the memory of the host program.
//
// Rendering is done by github.com/ardanlabs/jinja, which has no budgets of its own: a loop
// over range(10**9), a self-recursive macro or a string doubled in a loop would run until
// the process dies. This package enforces budgets around it, without changing what a
// template renders:
//
//  1. Compile parses the template with a parser that mirrors the library's grammar, and
//     refuses templates whose size, nesting or shape would make the library's own parser or
//     renderer do unbounded work (deep nesting, quadratic whitespace trimming, break outside
//     a loop, the reserved name prefix).
//  2. It then rewrites the template so that every place where work can grow calls a hook:
//     each loop iteration, each macro and caller entry and exit, each output, each value an
//     operator, filter or call creates, the operands of every operation whose cost grows
//     with the size of its operands, and the arguments of the filters and methods whose
//     result can be much larger than their input (replace, indent, batch, join, tojson,
//     format, ...), which are checked against a projection of the result before the
//     library computes it. range is replaced by a version that refuses to build a list
//     beyond the budget. The rewritten template renders exactly what the original does
//     (the tests compare both on real chat templates and fuzzed ones).
//  3. Render runs the rewritten template with the hooks bound to a per-render budget
//     (Limits: iterations, recursion depth, output bytes, value bytes, total bytes created,
//     wall time) and a context.Context. A hook that finds a budget exhausted, the deadline
//     passed or the context done returns an error, which stops the library's evaluation
//     at once; the error wraps ErrLimit or the context's error.
//
// Each single operation between two hooks does work bounded by a small multiple of
// Limits.MaxValueBytes, so the budgets bound the whole render.
package jinjaguard
