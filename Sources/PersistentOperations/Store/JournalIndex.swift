import Foundation

/// The journal's in-memory index: for each record, its area and where its bytes are, plus
/// the little the queue orders by (enqueue sequence, priority); never a payload.
///
/// About 72 bytes a record plus the dictionary's overhead, and no allocation per record: the
/// key is a `UUID`, not a `String` (36 characters would take a heap allocation each), and no
/// payload is kept. The index also keeps, per segment, how many of its bytes
/// are live (belong to the current version of a record): the rest is what compaction reclaims.
struct JournalIndex: Sendable {
    /// The area a record is in.
    enum Area: UInt8, Sendable {
        case pending, failed
    }

    /// Where a record's bytes are.
    struct Location: Equatable, Sendable {
        /// The segment.
        var segment: JournalSegmentName
        /// The offset of the bytes in the segment.
        var offset: Int64
        /// Their length.
        var length: Int32
        /// `true`: the bytes are a whole frame (put or move to failed) whose body is the
        /// record; `false`: they are one record of a batch frame, bare.
        var isFrame: Bool

        /// The bytes the record keeps alive in its segment: its frame, or its part of a batch
        /// and the part's length field.
        var liveBytes: Int64 { Int64(length) + (isFrame ? 0 : 4) }
    }

    /// One record.
    struct Entry: Sendable {
        var area: Area
        var location: Location
        var enqueueSequence: UInt64
        var priority: Int
    }

    private(set) var entries: [UUID: Entry] = [:]
    /// Live bytes per segment.
    private(set) var liveBytes: [JournalSegmentName: Int64] = [:]
    private(set) var pendingCount = 0
    private(set) var failedCount = 0

    /// Sets the record `id` to `entry`, replacing what it was, in either area.
    mutating func set(_ id: UUID, _ entry: Entry) {
        let old = entries.updateValue(entry, forKey: id)
        if let old { account(old, sign: -1) }
        account(entry, sign: 1)
    }

    /// Removes the record `id` from whichever area holds it; returns what it was.
    @discardableResult
    mutating func remove(_ id: UUID) -> Entry? {
        guard let old = entries.removeValue(forKey: id) else { return nil }
        account(old, sign: -1)
        return old
    }

    /// Moves record `id` to `location` if it is still at `expected` (compaction copied it and
    /// nothing changed it meanwhile); returns whether it moved.
    @discardableResult
    mutating func relocate(_ id: UUID, from expected: Location, to location: Location) -> Bool {
        guard var entry = entries[id], entry.location == expected else { return false }
        entry.location = location
        set(id, entry)
        return true
    }

    /// Forgets the live-byte count of a segment compaction removed (its records moved).
    mutating func forgetSegment(_ segment: JournalSegmentName) {
        liveBytes[segment] = nil
    }

    private mutating func account(_ entry: Entry, sign: Int) {
        liveBytes[entry.location.segment, default: 0] += Int64(sign) * entry.location.liveBytes
        switch entry.area {
        case .pending: pendingCount += sign
        case .failed: failedCount += sign
        }
    }
}
