package serve

// notifyList is a client's list of notified channels (client.notify): in
// the order the events came, with a count of each channel's entries, so
// that whether a channel is named is known without scanning the list.
// (A scan per event once the list was full made every event cost up to
// the list's length, which has no bound: past maxNotified each channel
// not yet named is still appended.)
type notifyList struct {
	q    []uint32 // q[head:] are the entries, oldest first
	head int
	n    map[uint32]int // entries per channel; channels with none absent
}

// len is the number of entries.
func (l *notifyList) len() int { return len(l.q) - l.head }

// has reports whether ch has an entry.
func (l *notifyList) has(ch uint32) bool { return l.n[ch] > 0 }

// push appends an entry for ch.
func (l *notifyList) push(ch uint32) {
	if l.n == nil {
		l.n = map[uint32]int{}
	}
	l.q = append(l.q, ch)
	l.n[ch]++
}

// entries returns the entries, oldest first; the slice is the list's own
// until the next push or pop.
func (l *notifyList) entries() []uint32 { return l.q[l.head:] }

// pop removes the k oldest entries (k <= len).
func (l *notifyList) pop(k int) {
	for _, ch := range l.q[l.head : l.head+k] {
		if l.n[ch]--; l.n[ch] == 0 {
			delete(l.n, ch)
		}
	}
	l.head += k
	switch {
	case l.head == len(l.q):
		l.q, l.head = l.q[:0], 0
	case l.head > len(l.q)/2:
		// The rest moves to the front: each entry moves at most once per
		// entry popped before it, so popping stays O(1) per entry.
		l.q, l.head = append(l.q[:0], l.q[l.head:]...), 0
	}
}
