import Foundation

/// The journal's in-memory index: for each record, its area, its type, where its bytes are,
/// and the little that counts and due dates need (when it is due, whether it is periodic);
/// never a payload.
///
/// 32 bytes a record, in a table of 48-byte slots 80–90 % full (``RecordTable``): 53 to 60
/// bytes a record in all, and no allocation per record. The key is a `UUID`, not a `String`
/// (36 characters would take a heap allocation each); a record's type is an ordinal into one
/// list of the type identifiers, and its segment an ordinal into the list of the segments
/// (``Entry``, with its whole ``Location``, is what readers get). The index also keeps, per
/// segment, how many of its bytes are live (belong to the current version of a record): the
/// rest is what compaction reclaims.
struct JournalIndex: Sendable {
    /// The area a record is in.
    enum Area: UInt8, Sendable {
        case pending, failed
    }

    /// Where a record's bytes are. (The offset first: a segment's name takes 12 bytes, and
    /// the fields after it fill the 4 its alignment would leave.)
    struct Location: Equatable, Sendable {
        /// The offset of the bytes in the segment.
        var offset: Int64
        /// The segment.
        var segment: JournalSegmentName
        /// Their length.
        var length: Int32
        /// `true`: the bytes are a whole frame (put or move to failed) whose body is the
        /// record; `false`: they are one record of a batch frame, bare.
        var isFrame: Bool

        init(segment: JournalSegmentName, offset: Int64, length: Int32, isFrame: Bool) {
            self.offset = offset
            self.segment = segment
            self.length = length
            self.isFrame = isFrame
        }

        /// The bytes the record keeps alive in its segment: its frame, or its part of a batch
        /// and the part's length field.
        var liveBytes: Int64 { Int64(length) + (isFrame ? 0 : 4) }
    }

    /// One record, as readers of the index see it (stored as a ``StoredEntry``).
    struct Entry: Sendable {
        var location: Location
        var area: Area
        /// Attempts in flight the record itself counts, at most 255 (records of the journal
        /// count theirs in attempt frames: 0).
        var attemptsInFlight: UInt8 = 0
        /// Whether it is a periodic operation's record.
        var isPeriodic = false
        /// Its type's position in ``typeNames`` (see ``typeOrdinal(_:)``).
        var type: UInt32
        /// When it may next start, in seconds since the reference date; NaN: it may start now.
        fileprivate var dueInterval: Double

        fileprivate init(_ stored: StoredEntry, segmentNames: [JournalSegmentName]) {
            location = Location(
                segment: segmentNames[Int(stored.segment)], offset: stored.offset, length: stored.length, isFrame: stored.isFrame
            )
            area = stored.area
            attemptsInFlight = stored.attemptsInFlight
            isPeriodic = stored.isPeriodic
            type = stored.type
            dueInterval = stored.dueInterval
        }

        init(area: Area, attemptsInFlight: UInt8 = 0, type: UInt32, location: Location, dueDate: Date? = nil, isPeriodic: Bool = false) {
            self.location = location
            self.area = area
            self.attemptsInFlight = attemptsInFlight
            self.isPeriodic = isPeriodic
            self.type = type
            dueInterval = dueDate?.timeIntervalSinceReferenceDate ?? .nan
        }

        /// When it may next start: the later of its not-before and next-attempt dates; `nil`
        /// when it may start now.
        var dueDate: Date? {
            dueInterval.isNaN ? nil : Date(timeIntervalSinceReferenceDate: dueInterval)
        }
    }

    /// One record as the table holds it: 32 bytes (see ``MemoryLayout``'s figure in the
    /// tests), its segment an ordinal into ``segmentNames``.
    struct StoredEntry: Sendable {
        fileprivate var dueInterval: Double
        fileprivate var offset: Int64
        fileprivate var segment: UInt32
        fileprivate var length: Int32
        fileprivate var type: UInt32
        fileprivate var isFrame: Bool
        fileprivate var area: Area
        fileprivate var attemptsInFlight: UInt8
        fileprivate var isPeriodic: Bool
    }

    /// The records, read as ``Entry`` values: `entries[id]`, iteration, `count`, `keys`.
    var entries: Entries { Entries(table: table, segmentNames: segmentNames) }

    /// A read-only view of the records.
    struct Entries: Sequence {
        fileprivate let table: RecordTable<StoredEntry>
        fileprivate let segmentNames: [JournalSegmentName]

        var count: Int { table.count }
        var isEmpty: Bool { table.isEmpty }
        var keys: [UUID] { table.keys }

        subscript(id: UUID) -> Entry? {
            table[id].map { Entry($0, segmentNames: segmentNames) }
        }

        func makeIterator() -> Iterator {
            Iterator(base: table.makeIterator(), segmentNames: segmentNames)
        }

        struct Iterator: IteratorProtocol {
            fileprivate var base: RecordTable<StoredEntry>.Iterator
            fileprivate let segmentNames: [JournalSegmentName]

            mutating func next() -> (key: UUID, value: Entry)? {
                base.next().map { ($0.key, Entry($0.value, segmentNames: segmentNames)) }
            }
        }
    }

    private var table = RecordTable<StoredEntry>()
    /// The segments the records are in, by ordinal; a forgotten segment's ordinal is given to
    /// the next new one.
    private var segmentNames: [JournalSegmentName] = []
    private var segmentOrdinals: [JournalSegmentName: UInt32] = [:]
    private var freeSegmentOrdinals: [UInt32] = []
    private var lastSegment: (name: JournalSegmentName, ordinal: UInt32)?
    /// The live bytes of `segment`.
    func liveBytes(of segment: JournalSegmentName) -> Int64 {
        let unsettled = unsettledLiveBytes.map { $0.segment == segment ? $0.delta : 0 } ?? 0
        return (settledLiveBytes[segment] ?? 0) + unsettled
    }

    /// The live bytes of every segment.
    private(set) var totalLiveBytes: Int64 = 0
    /// Live bytes per segment.
    private var settledLiveBytes: [JournalSegmentName: Int64] = [:]
    /// Changes of one segment's live bytes not yet in `settledLiveBytes`: the records of a
    /// segment are indexed one after another, and its count is looked up once for the run.
    private var unsettledLiveBytes: (segment: JournalSegmentName, delta: Int64)?
    private(set) var pendingCount = 0
    /// How many times a record the index held was rewritten, moved or removed: while this
    /// stays the same, every record listed earlier is where it was listed (records added
    /// since do not count).
    private(set) var replacements: UInt64 = 0
    private(set) var failedCount = 0
    /// The type identifiers of the records, each once, by ordinal.
    private(set) var typeNames: [String] = []
    private var typeOrdinals: [String: UInt32] = [:]
    private var lastType: (name: String, ordinal: UInt32)?
    /// The records of each type, by ordinal, in each area: counts by type without reading a record.
    private(set) var pendingByType: [Int] = []
    private(set) var failedByType: [Int] = []
    /// The pending records whose own fields count attempts in flight (few: the journal counts
    /// attempts in attempt frames; records migrated from the earlier layout may count some).
    private(set) var pendingWithAttemptsInFlight: Set<UUID> = []
    /// The records (in either area) added with an idempotency key: the key and the enqueue
    /// sequence of each, and the records of each key (only those records pay for it).
    private(set) var idempotencyKeys: [UUID: (key: String, sequence: UInt64)] = [:]
    private(set) var recordsByIdempotencyKey: [String: Set<UUID>] = [:]

    /// The ordinal of type identifier `name` for ``Entry/type``, given it the first time.
    mutating func typeOrdinal(_ name: String) -> UInt32 {
        // Records of one type come in runs: the last one's is compared before any hashing.
        if let last = lastType, last.name == name { return last.ordinal }
        let ordinal: UInt32
        if let known = typeOrdinals[name] {
            ordinal = known
        } else {
            ordinal = UInt32(typeNames.count)
            typeNames.append(name)
            typeOrdinals[name] = ordinal
            pendingByType.append(0)
            failedByType.append(0)
        }
        lastType = (name, ordinal)
        return ordinal
    }

    /// The ordinal of `segment` for ``StoredEntry/segment``, given it the first time.
    private mutating func segmentOrdinal(_ segment: JournalSegmentName) -> UInt32 {
        // Records are indexed in runs of one segment: the last one's is compared first.
        if let last = lastSegment, last.name == segment { return last.ordinal }
        let ordinal: UInt32
        if let known = segmentOrdinals[segment] {
            ordinal = known
        } else if let free = freeSegmentOrdinals.popLast() {
            ordinal = free
            segmentNames[Int(free)] = segment
            segmentOrdinals[segment] = free
        } else {
            ordinal = UInt32(segmentNames.count)
            segmentNames.append(segment)
            segmentOrdinals[segment] = ordinal
        }
        lastSegment = (segment, ordinal)
        return ordinal
    }

    /// Sets the record `id` to `entry`, replacing what it was, in either area.
    mutating func set(_ id: UUID, _ entry: Entry) {
        let stored = StoredEntry(
            dueInterval: entry.dueInterval, offset: entry.location.offset, segment: segmentOrdinal(entry.location.segment),
            length: entry.location.length, type: entry.type, isFrame: entry.location.isFrame, area: entry.area,
            attemptsInFlight: entry.attemptsInFlight, isPeriodic: entry.isPeriodic
        )
        let old = table.updateValue(stored, forKey: id)
        if let old {
            replacements &+= 1
            account(Entry(old, segmentNames: segmentNames), sign: -1, id: id)
        }
        account(entry, sign: 1, id: id)
    }

    /// Sets the record `fields.id`, of `fields`, to be in `area` at `location`, replacing what
    /// it was, in either area.
    mutating func set(_ fields: RecordFormat.IndexFields, area: Area, location: Location) {
        set(fields.id, Entry(
            area: area, attemptsInFlight: UInt8(clamping: fields.attemptsInFlight), type: typeOrdinal(fields.typeIdentifier),
            location: location, dueDate: fields.dueDate, isPeriodic: fields.isPeriodic
        ))
        if let key = fields.idempotencyKey {
            if let old = idempotencyKeys[fields.id], old.key != key { forgetIdempotencyKey(of: fields.id) }
            idempotencyKeys[fields.id] = (key, fields.enqueueSequence)
            recordsByIdempotencyKey[key, default: []].insert(fields.id)
        } else if !idempotencyKeys.isEmpty {
            forgetIdempotencyKey(of: fields.id)
        }
    }

    /// The idempotency key of record `id` and its enqueue sequence, when it has one.
    func idempotencyKey(of id: UUID) -> (key: String, sequence: UInt64)? {
        idempotencyKeys.isEmpty ? nil : idempotencyKeys[id]
    }

    private mutating func forgetIdempotencyKey(of id: UUID) {
        guard let (key, _) = idempotencyKeys.removeValue(forKey: id) else { return }
        recordsByIdempotencyKey[key]?.remove(id)
        if recordsByIdempotencyKey[key]?.isEmpty == true { recordsByIdempotencyKey[key] = nil }
    }

    /// Makes room for `count` records in all, so that the table is not grown (and every
    /// entry moved) again and again while a large journal is read.
    mutating func reserveCapacity(_ count: Int) {
        table.reserveCapacity(count)
    }

    /// Gives back the room of a table made larger than its records need (a capacity reserved
    /// from the segments' sizes counts removed records too), where it is a sixteenth more.
    mutating func shrinkToFit() {
        table.shrinkIfSparse()
    }

    /// Removes the record `id` from whichever area holds it; returns what it was.
    @discardableResult
    mutating func remove(_ id: UUID) -> Entry? {
        guard let stored = table.removeValue(forKey: id) else { return nil }
        replacements &+= 1
        let old = Entry(stored, segmentNames: segmentNames)
        account(old, sign: -1, id: id)
        if !idempotencyKeys.isEmpty { forgetIdempotencyKey(of: id) }
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
        settleLiveBytes()
        let forgotten = settledLiveBytes.removeValue(forKey: segment) ?? 0
        totalLiveBytes -= forgotten
        // Its ordinal is given again only when no record is there (compaction moved them
        // all; one it could not move was changed meanwhile, and so is in a later segment).
        guard forgotten == 0, let ordinal = segmentOrdinals.removeValue(forKey: segment) else { return }
        if lastSegment?.name == segment { lastSegment = nil }
        freeSegmentOrdinals.append(ordinal)
    }

    private mutating func settleLiveBytes() {
        guard let (segment, delta) = unsettledLiveBytes else { return }
        unsettledLiveBytes = nil
        settledLiveBytes[segment, default: 0] += delta
    }

    private mutating func account(_ entry: Entry, sign: Int, id: UUID) {
        let delta = Int64(sign) * entry.location.liveBytes
        totalLiveBytes += delta
        if let unsettled = unsettledLiveBytes, unsettled.segment == entry.location.segment {
            unsettledLiveBytes?.delta += delta
        } else {
            settleLiveBytes()
            unsettledLiveBytes = (entry.location.segment, delta)
        }
        switch entry.area {
        case .pending:
            pendingCount += sign
            pendingByType[Int(entry.type)] += sign
            if entry.attemptsInFlight > 0 {
                if sign > 0 { pendingWithAttemptsInFlight.insert(id) } else { pendingWithAttemptsInFlight.remove(id) }
            }
        case .failed:
            failedCount += sign
            failedByType[Int(entry.type)] += sign
        }
    }
}
