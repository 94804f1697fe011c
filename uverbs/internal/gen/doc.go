// Command gen turns uverbs/layouts.txt (every uverbs struct: its C name,
// size and the offset, width and kind of each member) into the Go structs
// with their Encode/Decode methods (uverbs/zz_layouts.go) and into the C
// table that test/uverbslayout compares against the uapi headers
// (test/uverbslayout/zz_ctable.h). Run it with `go generate ./uverbs`.
package main
