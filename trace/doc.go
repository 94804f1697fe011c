// Package trace is softnic's one event schema (a named stage with virtual
// start/end time, bytes and TLP counts, or a warning) and its writers: text
// timeline, Chrome trace JSON for Perfetto, and pcap of wire frames. Chrome
// format: the Trace Event Format as Perfetto reads it (timing.md §8).
package trace
