package placement

import "strconv"

// Partition is the partition among n that Kafka's default partitioner
// (the Java producer's, and franz-go's StickyKeyPartitioner, which the
// producer uses) gives a record key: toPositive(murmur2(key)) % n.
func Partition(key []byte, n int32) int32 {
	if n <= 0 {
		return 0
	}
	return int32(murmur2(key)&0x7fffffff) % n
}

// OfConversation is the partition of the event topic that holds the
// conversation's events (the producer keys them by its decimal id), and so
// the partition whose server holds the conversation's state.
func OfConversation(conversationID int64, n int32) int32 {
	return Partition(strconv.AppendInt(make([]byte, 0, 20), conversationID, 10), n)
}

// OfUser is the partition of the user-keyed topic that carries the user's
// deliveries (keyed by the decimal user id, like conversations), and so
// the partition whose server holds the user's state.
func OfUser(userID int64, n int32) int32 {
	return Partition(strconv.AppendInt(make([]byte, 0, 20), userID, 10), n)
}

// murmur2 is Kafka's Utils.murmur2 (seed 0x9747b28c).
func murmur2(b []byte) uint32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
