// Package search is the engine of the grep and glob tools: a parallel
// read-ahead walk of a sandbox.FS, glob patterns with bounded brace
// expansion, a regexp matcher with literal prefilters, and the per-file
// grep run on a pool of readers.
//
// It is apart from the tools so that the same engine runs in two places:
// in the server over any sandbox FS, and whole inside a sandbox, where
// every FS call is local instead of a round trip into a Pod. Requests and
// results are therefore plain JSON-serializable values, and results are
// streamed, one file (or path) at a time, in walk order: depth first,
// entries in name order. A FileMatch carries only the lines the grep tool
// renders (the matches and their context), not the file. Rendering,
// masking, paging and spilling stay in the tools, which also check the
// results of a search that ran inside a sandbox before showing them.
//
// The package imports sandbox (for FS and its errors) and doublestar only.
package search
