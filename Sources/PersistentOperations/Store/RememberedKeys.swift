import Foundation

/// The idempotency keys a journal remembers after the records that held them were removed
/// (its retire frames), each until its date, and the segment holding each one's frame.
///
/// A key may name several records (the members of one batch); a record is remembered once
/// (a retire frame read again, from a compaction's copy, replaces the first). Expired keys
/// are dropped by ``prune(before:)``, oldest first; until then they are not listed.
///
/// ```swift
/// let now = Date()
/// var keys = RememberedKeys()
/// let retired = RetiredKey(id: UUID(), sequence: 1, rememberedUntil: now.addingTimeInterval(300), key: "order 42")
/// keys.insert(retired, segment: JournalSegmentName(number: 1), size: 90)
/// assert(keys.records(forKey: "order 42", at: now) == [retired])   // until the window ends
/// keys.prune(before: now.addingTimeInterval(300))                  // then forgotten
/// ```
struct RememberedKeys: Sendable {
    /// One remembered record.
    struct Entry: Sendable {
        var retired: RetiredKey
        /// The segment holding its retire frame, and the frame's size.
        var segment: JournalSegmentName
        var size: Int64
    }

    private(set) var byKey: [String: [Entry]] = [:]
    /// The bytes of each segment's frames that remembered entries keep alive.
    private var bytesBySegment: [JournalSegmentName: Int64] = [:]
    /// Their sum over every segment.
    private(set) var totalLiveBytes: Int64 = 0
    /// Every insertion, in order, for pruning: dates mostly increase (one window per store).
    private var order: [(key: String, id: UUID, until: Date)] = []
    private var orderStart = 0

    var isEmpty: Bool { byKey.isEmpty }

    /// The bytes of `segment` kept alive by remembered keys.
    func liveBytes(of segment: JournalSegmentName) -> Int64 {
        bytesBySegment[segment] ?? 0
    }

    /// The records remembered under `key` at `now`.
    func records(forKey key: String, at now: Date) -> [RetiredKey] {
        (byKey[key] ?? []).lazy.filter { $0.retired.rememberedUntil > now }.map(\.retired)
    }

    /// Every entry whose frame is in one of `segments` and is still remembered at `now`.
    func entries(in segments: Set<JournalSegmentName>, at now: Date) -> [Entry] {
        byKey.values.flatMap { $0.filter { segments.contains($0.segment) && $0.retired.rememberedUntil > now } }
    }

    /// Remembers `retired`, whose frame of `size` bytes is in `segment`, replacing what was
    /// remembered of the same record.
    mutating func insert(_ retired: RetiredKey, segment: JournalSegmentName, size: Int64) {
        var entries = byKey[retired.key] ?? []
        if let index = entries.firstIndex(where: { $0.retired.id == retired.id }) {
            bytesBySegment[entries[index].segment, default: 0] -= entries[index].size
            totalLiveBytes -= entries[index].size
            entries.remove(at: index)
        }
        entries.append(Entry(retired: retired, segment: segment, size: size))
        byKey[retired.key] = entries
        bytesBySegment[segment, default: 0] += size
        totalLiveBytes += size
        order.append((retired.key, retired.id, retired.rememberedUntil))
    }

    /// Moves the entry of record `id` under `key` from segment `from` to `to` (a compaction
    /// copied its frame there); an entry that is gone or elsewhere stays as it is.
    mutating func relocate(key: String, id: UUID, from: JournalSegmentName, to: JournalSegmentName) {
        guard let index = byKey[key]?.firstIndex(where: { $0.retired.id == id && $0.segment == from }),
              let size = byKey[key]?[index].size else { return }
        byKey[key]?[index].segment = to
        bytesBySegment[from, default: 0] -= size
        bytesBySegment[to, default: 0] += size
    }

    /// Forgets every entry whose frame is in `segment` (compaction removed it: what was still
    /// remembered moved first).
    mutating func forgetSegment(_ segment: JournalSegmentName) {
        guard let forgotten = bytesBySegment.removeValue(forKey: segment) else { return }
        totalLiveBytes -= forgotten
        for (key, entries) in byKey where entries.contains(where: { $0.segment == segment }) {
            let kept = entries.filter { $0.segment != segment }
            byKey[key] = kept.isEmpty ? nil : kept
        }
    }

    /// Drops the entries expired at `now`, in the order they were inserted, stopping at the
    /// first that is not (one that expires later than an entry after it is dropped late).
    mutating func prune(before now: Date) {
        while orderStart < order.count, order[orderStart].until <= now {
            let (key, id, until) = order[orderStart]
            orderStart += 1
            guard var entries = byKey[key], let index = entries.firstIndex(where: { $0.retired.id == id && $0.retired.rememberedUntil == until }) else { continue }
            bytesBySegment[entries[index].segment, default: 0] -= entries[index].size
            totalLiveBytes -= entries[index].size
            entries.remove(at: index)
            byKey[key] = entries.isEmpty ? nil : entries
        }
        if orderStart > 1024, orderStart * 2 > order.count {
            order.removeFirst(orderStart)
            orderStart = 0
        }
    }
}
