import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The journal store
// =================
//
// On disk, `<root>/journal/` holds segment files (see `JournalSegmentFile.swift` for their
// names, `JournalSegment.swift` and `JournalFrame.swift` for their bytes), directory 0700,
// files 0600, and `<root>/quarantine/` the bytes open found damaged. Every change is one frame
// appended to the active (last) segment by its `JournalWriter`:
//
//     change                 frame          body
//     add, update, requeue   put            the record file bytes (`RecordFormat`): pending
//     add a batch            batch          the records' bytes, all or none: pending
//     move to failed         moveToFailed   the record as stored in the failed area
//     remove, purge          remove         the record's identifier (36 ASCII bytes)
//
// A put or a move sets the record, whichever area it was in; a removal removes it. Reading
// the segments in order and applying their frames gives the store's state: that is all open
// does (`JournalStore+Opening.swift`). Compaction (`JournalStore+Compaction.swift`) copies the
// live records of the sealed segments into one new segment.
//
// Durability. `.flushed` (the default): a change other than a removal returns once its frame
// is flushed; concurrent changes share flushes (group commit). A removal is written at once
// (a process crash keeps it) and flushed by the next change's flush or within the writer's
// flush delay: a power cut just after it may undo it, and the operation runs again
// (at-least-once); `strictRemovals` flushes removals too. `.processCrash` never flushes
// anything (not even directories): a crash or a kill keeps every change that returned, a
// power cut may not.
//
// The index is updated when a frame is written, before it is flushed: a reader may see a
// change whose call has not returned yet. A flush that fails fails the store for good
// (every later change throws): what was written since the last good flush cannot be trusted.
//
// Newer formats. A segment whose header names a newer format version makes open throw
// ``PersistenceError/Code/unsupportedFormatVersion``, and nothing is changed on disk. A frame
// of a kind this version does not know cannot be in a version 1 segment (a new kind comes
// with a new segment format version), so the scan reports it as damage, and it is quarantined
// like any corrupt frame. An `attempt` frame (crash evidence) is read and ignored for now. A record
// of a newer record format inside a valid frame is kept where it is and reported as skipped,
// and the store opens read-only (every change throws ``PersistenceError/Code/storeNotWritable``):
// compaction could not copy what it cannot read, and a newer library may rely on frames this
// one would misplace.

/// A crash-safe store of operation records in an append-only journal of property-list records,
/// with an in-memory index; see the description at the top of this file.
///
/// The store takes no directory lock: its owner (the record store) holds the store's lock.
///
/// ```swift
/// let journal = try JournalStore(directory: directory)
/// let record = OperationRecord(typeIdentifier: "upload", payload: Data([1]),
///                              enqueueSequence: journal.nextEnqueueSequence())
/// try journal.add(record)                        // durable when it returns
/// try journal.removePending(id: record.id)       // written now, flushed with the next commit
/// journal.close()
/// ```
///
/// Thread safety: every method may be called from any thread. Changes to one record must be
/// serialised by the caller (the queue runs one operation per record).
package final class JournalStore: Sendable {
    /// How durable a change is when its call returns.
    package enum Durability: Sendable {
        /// Flushed to stable storage (removals: see ``Configuration/strictRemovals``).
        case flushed
        /// Written to the file only, never flushed: survives a process crash or kill, not a
        /// power cut.
        case processCrash
    }

    /// Settings of a journal store.
    ///
    /// ```swift
    /// let settings = JournalStore.Configuration(durability: .processCrash, strictRemovals: true)
    /// let journal = try JournalStore(directory: directory, configuration: settings)
    /// journal.close()
    /// ```
    package struct Configuration: Sendable {
        /// The default size past which the active segment is sealed and a new one started: 4 MiB.
        package static let defaultSegmentSize = 4 << 20
        /// The default size the sealed segments must reach before compaction runs: 1 MiB.
        package static let defaultCompactionMinimumSize = 1 << 20

        /// How durable changes are. Default: ``Durability/flushed``.
        package var durability: Durability
        /// Whether a removal is flushed before it returns. Default: `false` (it rides along
        /// with the next flush, within ``flushDelay``).
        package var strictRemovals: Bool
        /// The size past which the active segment is sealed. Default: 4 MiB.
        package var segmentSize: Int
        /// Compaction runs when the sealed segments hold at least this many bytes, more than
        /// half of them dead. Default: 1 MiB.
        package var compactionMinimumSize: Int
        /// Whether compaction starts by itself after changes (off the caller's thread).
        /// Default: `true`.
        package var compactsAutomatically: Bool
        /// Whether sealed segments get hint files (see `JournalStore+Hints`); hints already
        /// there are read either way. Default: `true`. (Off for a test whose file-system calls
        /// must be the same in every run: hints are made on another thread.)
        package var makesHints = true
        /// How long a written frame waits at most for a flush. Default: 50 ms.
        package var flushDelay: TimeInterval
        /// The largest record written or read, in bytes. Default: 1 MiB.
        package var maximumRecordSize: Int
        /// The file system calls go through. Default: ``FileSystem/system``.
        package var fileSystem: FileSystem
        /// Whether the store is only read: open creates, cuts, quarantines and removes nothing
        /// (damage is reported in ``OpenReport/skipped``), and every change throws
        /// ``PersistenceError/Code/storeNotWritable``. Default: `false`.
        package var isReadOnly: Bool
        /// How long the idempotency key of a removed record is remembered (a retire frame).
        /// Default: 300 s; 0 forgets it with the record.
        package var idempotencyWindow: TimeInterval = 300
        /// The clock that dates retire frames and expires them. Default: the system clock.
        package var clock: @Sendable () -> Date = { Date() }

        /// Creates settings.
        package init(
            durability: Durability = .flushed, strictRemovals: Bool = false, segmentSize: Int = defaultSegmentSize,
            compactionMinimumSize: Int = defaultCompactionMinimumSize, compactsAutomatically: Bool = true,
            flushDelay: TimeInterval = JournalWriter.defaultFlushDelay,
            maximumRecordSize: Int = RecordFormat.defaultMaximumRecordSize, fileSystem: FileSystem = .system,
            isReadOnly: Bool = false
        ) {
            precondition(segmentSize > JournalSegment.headerSize, "segmentSize must exceed the segment header size")
            precondition(maximumRecordSize > RecordFormat.headerSize, "maximumRecordSize must exceed the record header size")
            self.durability = durability
            self.strictRemovals = strictRemovals
            self.segmentSize = segmentSize
            self.compactionMinimumSize = compactionMinimumSize
            self.compactsAutomatically = compactsAutomatically
            self.flushDelay = flushDelay
            self.maximumRecordSize = maximumRecordSize
            self.fileSystem = fileSystem
            self.isReadOnly = isReadOnly
        }

        var flushes: Bool { durability == .flushed && !isReadOnly }
        /// The largest frame: a batch of many records.
        var maximumFrameSize: Int { max(JournalFrame.defaultMaximumSize, maximumRecordSize + JournalFrame.headerSize) }
    }

    /// What open found that was not a usable record.
    ///
    /// ```swift
    /// let journal = try JournalStore(directory: directory)
    /// for entry in journal.openReport.quarantined { log("\(entry.name): \(entry.reason)") }
    /// journal.close()
    /// ```
    package struct OpenReport: Sendable {
        /// Damaged bytes copied to the quarantine area (and records that did not decode).
        package var quarantined: [LoadReport.Entry] = []
        /// Records of a newer format, left where they are (the store is then read-only).
        package var skipped: [LoadReport.Entry] = []
        /// Bytes cut off the end of the last segment (a torn tail), 0 when none.
        package var truncatedBytes = 0
        /// What was cut off the end of the journal: the torn tail of the last segment, or a
        /// last segment whose creation a crash cut short. Never an acknowledged change (it was
        /// not flushed), so neither kept nor reported as damage.
        package var cutOff: [LoadReport.Entry] = []
    }

    /// The active segment: the one the writer appends to.
    struct ActiveSegment: Sendable {
        var file: JournalSegmentFile
        var writer: JournalWriter
        var salt: UInt32
    }

    /// The mutable state, behind ``state``.
    struct State: Sendable {
        var index = JournalIndex()
        /// Every segment, the active one included, open for reading.
        var segments: [JournalSegmentName: JournalSegmentFile] = [:]
        /// The valid size of each segment, and their sum.
        var sizes = SegmentSizes()
        var active: ActiveSegment?
        /// Writers of sealed segments, closed when compaction removes their segment.
        var sealedWriters: [JournalSegmentName: JournalWriter] = [:]
        /// Segments sealed after a successful flush of everything written to them.
        var durablySealed: Set<JournalSegmentName> = []
        var lastEnqueueSequence: UInt64 = 0
        /// Attempt markers (crash evidence, see `JournalStore+Attempts`), and the segment
        /// holding each one's frame.
        var attempts: [UUID: (marker: AttemptMarker, segment: JournalSegmentName)] = [:]
        /// The idempotency keys of removed records, remembered for a while (retire frames).
        var remembered = RememberedKeys()
        /// The space reserve is gone (used by a removal on a full disk, or it could not be made).
        var isShortOfSpace = false
        var isClosed = false
        var isCompacting = false
        /// Why the store takes no changes, when it does not.
        var failure: PersistenceError?
        var compactions = 0
        /// The sealed segments whose hint files hold (see `JournalStore+Hints`).
        var hinted: Set<JournalSegmentName> = []

        /// Forgets `segment` (compacted, or left behind by a compaction a crash interrupted):
        /// its file, size, index entries, remembered keys and hint. Returns its writer, if it
        /// was sealed by this process, to be closed outside the lock.
        mutating func forgetSegment(_ segment: JournalSegmentName) -> JournalWriter? {
            segments[segment] = nil
            sizes[segment] = nil
            index.forgetSegment(segment)
            remembered.forgetSegment(segment)
            hinted.remove(segment)
            return sealedWriters.removeValue(forKey: segment)
        }

        /// The bytes of `segment` that records and remembered keys keep alive.
        func liveBytes(of segment: JournalSegmentName) -> Int64 {
            index.liveBytes(of: segment) + remembered.liveBytes(of: segment)
        }

        /// The bytes of every segment that records and remembered keys keep alive, kept as
        /// they change: compaction's check after each change adds up no segments.
        var totalLiveBytes: Int64 {
            index.totalLiveBytes + remembered.totalLiveBytes
        }
    }

    /// The store directory (`<root>`).
    package let directory: URL
    /// What open found.
    package let openReport: OpenReport
    let configuration: Configuration
    let journalPath: String
    let quarantinePath: String
    let state: Locked<State>
    /// Runs compactions one at a time, off the callers' threads.
    let compactionQueue = DispatchQueue(label: "PersistentOperations.JournalStore.compaction")

    /// Opens the journal store at `directory`, creating it (mode 0700) when missing: reads
    /// every segment once, cuts a torn tail off the last, quarantines damaged bytes.
    ///
    /// - Throws: ``PersistenceError/Code/unsupportedFormatVersion`` when a segment was written
    ///   by a newer library; ``PersistenceError/Code/directoryUnavailable`` when the
    ///   directories cannot be created; ``PersistenceError/Code/readFailed`` or
    ///   ``PersistenceError/Code/writeFailed`` when the file system fails.
    package init(directory: URL, configuration: Configuration = Configuration()) throws {
        self.directory = directory
        self.configuration = configuration
        let root = StoreLayout(directory: directory).root
        journalPath = root + "/journal"
        quarantinePath = root + "/" + StoreLayout.Area.quarantine.rawValue
        let opened = try Self.open(root: root, journalPath: journalPath, quarantinePath: quarantinePath, configuration: configuration)
        openReport = opened.report
        segmentsOpenedFromHints = Set(opened.state.hinted.map(\.fileName))
        state = Locked(opened.state)
        ensureReserve()
        hintSegmentsLater(opened.unhinted)
    }

    deinit {
        // Not `close()`: the last reference may be dropped by a compaction, on its own queue.
        closeSegments()
    }

    /// Waits for a compaction under way, flushes what was written and closes the segments;
    /// later changes throw ``PersistenceError/Code/storeNotWritable``.
    package func close() {
        // A compaction under way, the one it may start, and the start-over of a store whose
        // records have all gone (its last removal may have found a compaction running).
        compactionQueue.sync {}
        compactionQueue.sync {}
        compactIfDue()
        state.withLock { $0.isClosed = true }
        compactionQueue.sync {}
        closeSegments()
    }

    private func closeSegments() {
        let writers: [JournalWriter] = state.withLock { state in
            state.isClosed = true
            defer {
                state.active = nil
                state.sealedWriters = [:]
                state.segments = [:]
            }
            return [state.active?.writer].compactMap { $0 } + Array(state.sealedWriters.values)
        }
        for writer in writers { writer.close() }
    }

    // MARK: Queries

    /// The number of pending records.
    package var pendingCount: Int { state.withLock { $0.index.pendingCount } }
    /// The number of failed records.
    package var failedCount: Int { state.withLock { $0.index.failedCount } }
    /// How many compactions have completed since open (for tests).
    package var compactionCount: Int { state.withLock { $0.compactions } }
    /// The file names of the segments the open read from their hints (for tests).
    package let segmentsOpenedFromHints: Set<String>

    /// The total size of the segment files, in bytes.
    package var journalSize: Int64 {
        state.withLock { state in
            state.sizes.total - (state.active.map { state.sizes[$0.file.name]! } ?? 0)
                + (state.active.map { $0.writer.size } ?? 0)
        }
    }

    /// Whether the store takes changes; `false` after a failed flush, or when open found
    /// records of a newer format.
    package var isWritable: Bool { state.withLock { $0.failure == nil && !$0.isClosed } }

    /// Takes no more changes (compactions included): each throws `reason`.
    package func refuseChanges(_ reason: PersistenceError) {
        state.withLock { state in
            if state.failure == nil { state.failure = reason }
        }
    }

    /// A new enqueue sequence number, greater than every one handed out or stored before.
    package func nextEnqueueSequence() -> UInt64 {
        state.withLock { state in
            state.lastEnqueueSequence += 1
            return state.lastEnqueueSequence
        }
    }

    /// The pending record `id`, read with one `pread` and verified before it is decoded.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, or
    ///   ``PersistenceError/Code/corruptRecord`` when its bytes changed since open.
    package func readPending(id: String) throws -> OperationRecord {
        try read(id: id, in: .pending)
    }

    /// The type and payload of the pending record `id`, for building its operation: its bytes
    /// read and verified as ``readPending(id:)`` reads them, without decoding its other fields.
    package func readPendingPayload(id: String) throws -> (typeIdentifier: String, payload: Data) {
        guard let uuid = Self.uuid(id), let (location, file) = state.withLock({ Self.locate(uuid, in: .pending, $0) }) else {
            throw notFound(id, in: .pending)
        }
        return try payload(of: recordBytes(at: location, in: file), at: location, id: uuid)
    }

    /// Where record `uuid` of `area` is, and its segment, in `state`.
    private static func locate(_ uuid: UUID, in area: JournalIndex.Area, _ state: State) -> (JournalIndex.Location, JournalSegmentFile)? {
        guard let entry = state.index.entries[uuid], entry.area == area, let file = state.segments[entry.location.segment] else { return nil }
        return (entry.location, file)
    }

    /// The type and payload of the record `bytes` read from `location` (see
    /// ``recordBytes(_:in:from:)``): read directly when they can be, else from the record
    /// decoded in full, which throws what is wrong with it.
    private func payload(of bytes: Data, at location: JournalIndex.Location, id uuid: UUID) throws -> (typeIdentifier: String, payload: Data) {
        if bytes.count <= configuration.maximumRecordSize,
           let fields = RecordFormat.payloadFields(of: bytes, checksumVerified: location.isFrame), fields.id == uuid {
            return (fields.typeIdentifier, fields.payload)
        }
        let record = try RecordFormat.decode(bytes, maximumSize: configuration.maximumRecordSize, checksumVerified: location.isFrame)
        return (record.typeIdentifier, record.payload)
    }

    /// The types and payloads of the pending records `ids`, as ``readPendingPayload(id:)``
    /// reads each, for building many operations at once: records that lie close together in a
    /// segment are read with one read (up to ``readWindow`` bytes). A record that is not
    /// pending, or cannot be read, gets the error ``readPendingPayload(id:)`` would throw.
    package func readPendingPayloads(ids: [String]) -> [String: Result<(typeIdentifier: String, payload: Data), any Error>] {
        var results: [String: Result<(typeIdentifier: String, payload: Data), any Error>] = [:]
        results.reserveCapacity(ids.count)
        func readAlone(_ id: String) {
            results[id] = Result { try readPendingPayload(id: id) }
        }
        var identifiers: [UUID: String] = [:]
        var (files, order, replacements) = state.withLock { state -> ([JournalSegmentFile], [LocatedRecord], UInt64) in
            var files: [JournalSegmentFile] = []
            var ordinals: [JournalSegmentName: Int32] = [:]
            var located: [LocatedRecord] = []
            for id in ids {
                guard let uuid = Self.uuid(id), let (location, file) = Self.locate(uuid, in: .pending, state) else { continue }
                let segment = ordinals[file.name] ?? {
                    files.append(file)
                    ordinals[file.name] = Int32(files.count - 1)
                    return Int32(files.count - 1)
                }()
                identifiers[uuid] = id
                located.append(LocatedRecord(id: uuid, segment: segment, location: location))
            }
            return (files, located, state.index.replacements)
        }
        // The others are not pending (or not readable as such): each says why.
        for id in ids where Self.uuid(id).flatMap({ identifiers[$0] }) == nil { readAlone(id) }
        order.sortByPlace()
        // Neighbours only: a window never reads more than a page between two records.
        readInWindows(order, files: files, listedAtReplacements: replacements, maximumGap: 4096, ahead: false) { _, bytes, location, file in
            (bytes, location, file)
        } _: { record, how in
            let id = identifiers[record.id]!
            guard case .read((let bytes, let location, let file)) = how else {
                readAlone(id)
                return
            }
            results[id] = Result {
                try payload(of: Data(try recordBytes(location, in: file, from: bytes)), at: location, id: record.id)
            }
        }
        return results
    }

    /// The failed record `id`; see ``readPending(id:)``.
    package func readFailed(id: String) throws -> OperationRecord {
        try read(id: id, in: .failed)
    }

    /// Calls `body` with each pending record, in the order they lie in the segments (no
    /// particular order of their own), read a window of up to ``readWindow`` bytes at a time:
    /// a few large sequential reads rather than one `pread` a record. Records changed or
    /// removed meanwhile are read as they are when their turn comes.
    ///
    /// `plain`: when given, a record with only the fields every record has goes to it instead,
    /// read without its payload and without checking the rest of its property list
    /// (``RecordFormat/plainFields(of:maximumSize:checksumVerified:typeIdentifiers:)``), for a
    /// caller that keeps no payload (a restore). Its checksums are not computed again: its
    /// frame was verified whole when the journal was opened, and the fields must name the
    /// record the index lists there. A caller that reads the payload later verifies it then.
    ///
    /// - Returns: the records that could not be read, with the reason.
    @discardableResult
    package func forEachPendingRecord(
        plain: ((RecordFormat.PlainFields) throws -> Void)? = nil, _ body: (OperationRecord) throws -> Void
    ) throws -> [LoadReport.Entry] {
        // Where each pending record lies (32 bytes a record), in the segments' order: a
        // filtered copy of the index would hold every index entry of the area a second time.
        var (files, order, replacements, hinted) = state.withLock { state -> ([JournalSegmentFile], [LocatedRecord], UInt64, Set<Int32>) in
            let names = state.segments.keys.sorted()
            let ordinals = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($0.element, Int32($0.offset)) })
            var located: [LocatedRecord] = []
            located.reserveCapacity(state.index.pendingCount)
            for (id, entry) in state.index.entries where entry.area == .pending {
                // A record whose segment is gone cannot be read: `read(uuid:in:)` says so below.
                let segment = ordinals[entry.location.segment] ?? -1
                located.append(LocatedRecord(id: id, segment: segment, location: entry.location))
            }
            let hinted = Set(names.indices.filter { state.hinted.contains(names[$0]) }.map { Int32($0) })
            return (names.map { state.segments[$0]! }, located, state.index.replacements, hinted)
        }
        order.sortByPlace()
        var unreadable: [LoadReport.Entry] = []
        /// `read` returns the record for `body`, or nil when it gave it to `plain`.
        func deliver(_ id: UUID, _ read: () throws -> OperationRecord?) throws {
            do {
                if let record = try read() { try body(record) }
            } catch let error as PersistenceError where error.code == .recordNotFound {
                return
            } catch let error as PersistenceError where error.code == .corruptRecord || error.code == .readFailed {
                unreadable.append(.init(name: id.uuidString, reason: error.message, code: error.code))
            }
        }
        // One copy of each type identifier for the plain records.
        let typeIdentifiers = InternedStrings()
        let readsPlain = plain != nil
        let maximumRecordSize = configuration.maximumRecordSize
        // Each record is read, and peeked or decoded, on the thread that reads ahead; what
        // needs the caller's state (`plain`, `body`) runs here.
        // The plain records of a hinted segment are read from its hint, all at once (see
        // `JournalStore+Hints`): the same fields, without reading the records.
        let journalPath = journalPath
        let fileSystem = configuration.fileSystem
        let fromHint: (ArraySlice<LocatedRecord>, JournalSegmentFile) -> [PendingRecord?] = { window, file in
            guard let hint = Self.readHintFile(of: file.name, journalPath: journalPath, fileSystem: fileSystem) else {
                return Array(repeating: nil, count: window.count)
            }
            // Both in offset order: one walk.
            var prepared: [PendingRecord?] = []
            prepared.reserveCapacity(window.count)
            var entries = hint.entries.makeIterator()
            var entry = entries.next()
            for record in window {
                var found: RecordFormat.PlainFields?
                while let current = entry {
                    guard case .record(let hinted) = current else {
                        entry = entries.next()
                        continue
                    }
                    if hinted.offset < record.offset {
                        entry = entries.next()
                        continue
                    }
                    if hinted.offset == record.offset, hinted.length == record.length, hinted.kind != .moveToFailed,
                       (hinted.kind == .batchPart) != record.isFrame, hinted.fields.id == record.id {
                        found = hinted.plain
                    }
                    break
                }
                prepared.append(found.map { .plain($0) })
            }
            return prepared
        }
        try readInWindows(
            order, files: files, listedAtReplacements: replacements, ahead: true, hinted: readsPlain ? hinted : [], fromHint: fromHint
        ) { [self] record, bytes, location, file -> PendingRecord in
            // A plain record's frame (its own, or its batch's) was verified whole when the
            // journal was opened (an entry of the index is made only from a verified frame,
            // or from one this process wrote): its fields are read without computing a
            // checksum again, and must name the record listed here. Its payload is
            // verified when it is read to build the operation, as every record's is.
            if readsPlain, let body = try? recordBytes(location, in: file, from: bytes, checkingBody: false),
               let fields = RecordFormat.plainFields(
                   of: body, maximumSize: maximumRecordSize, checksumVerified: true, typeIdentifiers: &typeIdentifiers.strings
               ),
               fields.key.uuid == record.id {
                return .plain(fields)
            }
            do {
                // Slices, not copies: the decode copies the record's bytes once, for its parser.
                let verified = try recordBytes(location, in: file, from: bytes)
                return .record(try RecordFormat.decode(verified, maximumSize: maximumRecordSize, checksumVerified: location.isFrame))
            } catch {
                return .failed(error)
            }
        } _: { record, how in
            switch how {
            case .read(.plain(let fields)):
                try deliver(record.id) {
                    try plain?(fields)
                    return nil
                }
            case .read(.record(let read)):
                try deliver(record.id) { read }
            case .read(.failed(let error)):
                try deliver(record.id) { throw error }
            case .readAlone:
                try deliver(record.id) { try read(uuid: record.id, in: .pending) }
            case .removed:
                break
            }
        }
        return unreadable
    }

    /// A pending record as the thread that reads ahead made it ready.
    private enum PendingRecord {
        /// Its plain fields (see ``forEachPendingRecord(plain:_:)``).
        case plain(RecordFormat.PlainFields)
        /// The record, decoded.
        case record(OperationRecord)
        /// Why it could not be decoded.
        case failed(any Error)
    }

    /// The most bytes ``readInWindows(_:files:listedAtReplacements:maximumGap:ahead:prepare:_:)``
    /// reads at once (a record larger than this is read alone).
    static let readWindow = 1 << 20

    /// How ``readInWindows(_:files:listedAtReplacements:maximumGap:ahead:prepare:_:)`` found a
    /// record once its window was read.
    private enum WindowedRecord<Prepared> {
        /// Still where it was listed: what `prepare` made of its bytes.
        case read(Prepared)
        /// Rewritten or compacted since it was listed, or its window could not be read: to
        /// be read alone, where it is now.
        case readAlone
        /// No longer pending.
        case removed
    }

    /// A window of records read, and what `prepare` made of each.
    private struct PreparedWindow<Prepared> {
        /// The segment read; nil when the window could not be read.
        var file: JournalSegmentFile?
        var prepared: [Prepared]
    }

    /// The windows of `order` (sorted by segment and offset): runs of neighbours in one
    /// segment at most `maximumGap` bytes apart and ``readWindow`` bytes long in all (a
    /// record larger than that is a window of its own). The records of a segment in `whole`
    /// are one window, whatever their spread (a hinted segment's, see `JournalStore+Hints`).
    private static func windows(of order: [LocatedRecord], maximumGap: Int64, whole: Set<Int32> = []) -> [Range<Int>] {
        var windows: [Range<Int>] = []
        var first = 0
        while first < order.count {
            let segment = order[first].segment
            let start = order[first].offset
            var end = first + 1
            let isWhole = whole.contains(segment)
            while end < order.count, order[end].segment == segment,
                  isWhole || order[end].offset - (order[end - 1].offset + Int64(order[end - 1].length)) <= maximumGap,
                  isWhole || order[end].offset + Int64(order[end].length) - start <= Int64(Self.readWindow) {
                end += 1
            }
            windows.append(first..<end)
            first = end
        }
        return windows
    }

    /// Reads the records of `order` (sorted by segment and offset; a segment is an index into
    /// `files`, -1 for one that is gone) a window at a time (see ``windows(of:maximumGap:)``):
    /// a few large sequential reads rather than one `pread` a record, and `prepare` makes
    /// what the caller needs of each record's bytes (a slice of the window), where they lie,
    /// in which file. With `ahead`, windows are read and prepared on a thread of their own
    /// (``ReadAhead``), one ahead of the calling thread, into mapped pages (``MappedPages``);
    /// `prepare` must then touch nothing but its arguments.
    ///
    /// Then, on the calling thread, each record's place is looked up again (bytes once
    /// written never change in place), unless no record the index held has been replaced
    /// since `order` was listed (`listedAtReplacements`, the index's
    /// ``JournalIndex/replacements`` then: a million lookups are a tenth of a restore), and
    /// `body` is told how to read it.
    private func readInWindows<Prepared>(
        _ order: [LocatedRecord], files: [JournalSegmentFile], listedAtReplacements: UInt64, maximumGap: Int64 = .max, ahead: Bool,
        hinted: Set<Int32> = [], fromHint: ((ArraySlice<LocatedRecord>, JournalSegmentFile) -> [Prepared?])? = nil,
        prepare: @escaping (LocatedRecord, Data, JournalIndex.Location, JournalSegmentFile) -> Prepared,
        _ body: (LocatedRecord, WindowedRecord<Prepared>) throws -> Void
    ) rethrows {
        let windows = Self.windows(of: order, maximumGap: maximumGap, whole: hinted)
        let pages = ahead ? MappedPages() : nil
        defer { pages?.close() }
        let reader = ReadAhead(count: windows.count, name: "PersistentOperations.restore", readsAhead: ahead) { index in
            let window = order[windows[index]]
            if let fromHint, let first = window.first, hinted.contains(first.segment) {
                return Self.prepareHintedWindow(window, files: files, maximumGap: maximumGap, pages: pages, fromHint: fromHint, prepare: prepare)
            }
            return Self.prepareWindow(window, files: files, pages: pages, prepare: prepare)
        }
        defer { reader.finish() }
        for range in windows {
            let window = order[range]
            // (Preparing throws nothing: a window that cannot be read has no file.)
            let read = (try? reader.next()) ?? PreparedWindow(file: nil, prepared: [])
            guard let file = read.file else {
                for record in window { try body(record, .readAlone) }
                continue
            }
            let locations = state.withLock { state in
                state.index.replacements == listedAtReplacements
                    ? nil : window.map { record in state.index.entries[record.id].flatMap { $0.area == .pending ? $0.location : nil } }
            }
            for (index, record) in window.enumerated() {
                if let locations {
                    guard let location = locations[index] else {
                        try body(record, .removed)
                        continue
                    }
                    guard location.segment == file.name, location.offset == record.offset, location.length == record.length else {
                        try body(record, .readAlone)
                        continue
                    }
                }
                try body(record, .read(read.prepared[index]))
            }
        }
    }

    /// Prepares the records of `window`, all in one hinted segment: those `fromHint` makes
    /// from the segment's hint, and the others read a window at a time.
    private static func prepareHintedWindow<Prepared>(
        _ window: ArraySlice<LocatedRecord>, files: [JournalSegmentFile], maximumGap: Int64, pages: MappedPages?,
        fromHint: (ArraySlice<LocatedRecord>, JournalSegmentFile) -> [Prepared?],
        prepare: (LocatedRecord, Data, JournalIndex.Location, JournalSegmentFile) -> Prepared
    ) -> PreparedWindow<Prepared> {
        guard let first = window.first, first.segment >= 0 else { return PreparedWindow(file: nil, prepared: []) }
        let file = files[Int(first.segment)]
        var prepared = fromHint(window, file)
        let missing = prepared.indices.filter { prepared[$0] == nil }
        if !missing.isEmpty {
            let records = missing.map { window[window.startIndex + $0] }
            for range in windows(of: records, maximumGap: maximumGap) {
                let read = prepareWindow(records[range], files: files, pages: pages, prepare: prepare)
                guard read.file != nil else { return PreparedWindow(file: nil, prepared: []) }
                for (offset, value) in read.prepared.enumerated() { prepared[missing[range.lowerBound + offset]] = value }
            }
        }
        return PreparedWindow(file: file, prepared: prepared.map { $0! })
    }

    /// Reads `window` with one read (into `pages`, when given) and prepares each record.
    private static func prepareWindow<Prepared>(
        _ window: ArraySlice<LocatedRecord>, files: [JournalSegmentFile], pages: MappedPages?,
        prepare: (LocatedRecord, Data, JournalIndex.Location, JournalSegmentFile) -> Prepared
    ) -> PreparedWindow<Prepared> {
        guard let first = window.first, let last = window.last, first.segment >= 0 else { return PreparedWindow(file: nil, prepared: []) }
        let file = files[Int(first.segment)]
        let start = first.offset
        let count = Int(last.offset - start) + Int(last.length)
        guard let bytes = try? file.read(count: count, at: start, into: pages.map { pages in { try pages.bytes($0, path: file.path) } }) else {
            return PreparedWindow(file: nil, prepared: [])
        }
        var prepared: [Prepared] = []
        prepared.reserveCapacity(window.count)
        for record in window {
            let from = bytes.startIndex + Int(record.offset - start)
            prepared.append(prepare(record, bytes[from..<(from + Int(record.length))], record.location(in: file), file))
        }
        return PreparedWindow(file: file, prepared: prepared)
    }

    /// Where a pending record lies, for ``forEachPendingRecord(plain:_:)``: `segment` is the
    /// position of its segment's name in sorted order, -1 when the segment is not open.
    fileprivate struct LocatedRecord {
        // (In this order: 32 bytes.)
        var id: UUID
        var offset: Int64
        var segment: Int32
        /// The length, and in the top bit whether the bytes are a whole frame (a location's
        /// length is an `Int32`, never negative).
        private var lengthAndKind: UInt32

        init(id: UUID, segment: Int32, location: JournalIndex.Location) {
            self.id = id
            offset = location.offset
            self.segment = segment
            lengthAndKind = UInt32(location.length) | (location.isFrame ? 1 << 31 : 0)
        }

        var length: Int32 { Int32(lengthAndKind & ~(1 << 31)) }
        var isFrame: Bool { lengthAndKind & 1 << 31 != 0 }

        /// Where the record was listed, in `file`.
        func location(in file: JournalSegmentFile) -> JournalIndex.Location {
            JournalIndex.Location(segment: file.name, offset: offset, length: length, isFrame: isFrame)
        }
    }

    /// Every pending record, in run order, with what open found.
    package func loadPending() throws -> LoadReport {
        var report = LoadReport()
        let unreadable = try forEachPendingRecord { report.records.append($0) }
        report.quarantined = openReport.quarantined + unreadable
        report.skipped = openReport.skipped
        report.sortRecords()
        return report
    }

    /// The identifiers of the failed records, in no particular order.
    package var failedIdentifiers: [String] {
        state.withLock { state in state.index.entries.filter { $0.value.area == .failed }.map(\.key.uuidString) }
    }

    /// What the index knows of the two areas, read without a record: what
    /// `ReadOnlyPersistentStore.counts()` reports.
    package struct IndexCounts: Sendable, Equatable {
        package var pending = 0
        package var failed = 0
        package var pendingByType: [String: Int] = [:]
        package var failedByType: [String: Int] = [:]
        /// The pending records whose own fields count attempts in flight.
        package var pendingWithAttemptsInFlight: Set<String> = []
        /// The pending records of periodic operations, and by type.
        package var periodic = 0
        package var periodicByType: [String: Int] = [:]
        /// The earliest due date of a pending record (``OperationRecord/dueDate``), with
        /// `Date.distantPast` for one due now; `nil` when none is pending.
        package var earliestDueDate: Date?
    }

    /// The counts of the areas by type, the periodic records and the earliest due date, from
    /// the index (no record is read).
    package func indexCounts() -> IndexCounts {
        state.withLock { state in
            var counts = IndexCounts(pending: state.index.pendingCount, failed: state.index.failedCount)
            for (ordinal, name) in state.index.typeNames.enumerated() {
                if state.index.pendingByType[ordinal] > 0 { counts.pendingByType[name] = state.index.pendingByType[ordinal] }
                if state.index.failedByType[ordinal] > 0 { counts.failedByType[name] = state.index.failedByType[ordinal] }
            }
            counts.pendingWithAttemptsInFlight = Set(state.index.pendingWithAttemptsInFlight.map(\.uuidString))
            var periodicByOrdinal = [Int](repeating: 0, count: state.index.typeNames.count)
            var earliest = Double.infinity
            for (_, entry) in state.index.entries where entry.area == .pending {
                if entry.isPeriodic { periodicByOrdinal[Int(entry.type)] += 1 }
                earliest = Swift.min(earliest, entry.dueDate?.timeIntervalSinceReferenceDate ?? -.infinity)
            }
            for (ordinal, count) in periodicByOrdinal.enumerated() where count > 0 {
                counts.periodic += count
                counts.periodicByType[state.index.typeNames[ordinal]] = count
            }
            if earliest < .infinity {
                counts.earliestDueDate = earliest == -.infinity ? .distantPast : Date(timeIntervalSinceReferenceDate: earliest)
            }
            return counts
        }
    }

    /// Whether a record `id` is stored in the pending area.
    package func isPending(id: String) -> Bool {
        guard let uuid = Self.uuid(id) else { return false }
        return state.withLock { $0.index.entries[uuid]?.area == .pending }
    }

    /// Whether a record `id` is stored, in either area.
    package func contains(id: String) -> Bool {
        guard let uuid = Self.uuid(id) else { return false }
        return state.withLock { $0.index.entries[uuid] != nil }
    }

    /// Every failed record, in run order; records that can no longer be read are reported.
    package func loadFailed() throws -> LoadReport {
        var report = LoadReport()
        let ids = state.withLock { state in state.index.entries.filter { $0.value.area == .failed }.map(\.key) }
        for id in ids {
            do {
                report.records.append(try read(uuid: id, in: .failed))
            } catch let error as PersistenceError where error.code == .recordNotFound {
                continue
            } catch let error as PersistenceError where error.code == .corruptRecord || error.code == .readFailed {
                report.quarantined.append(.init(name: id.uuidString, reason: error.message, code: error.code))
            }
        }
        report.sortRecords()
        return report
    }

    // MARK: Reading one record

    private func read(id: String, in area: JournalIndex.Area) throws -> OperationRecord {
        guard let uuid = Self.uuid(id) else { throw notFound(id, in: area) }
        return try read(uuid: uuid, in: area)
    }

    private func read(uuid: UUID, in area: JournalIndex.Area) throws -> OperationRecord {
        guard let (location, file) = state.withLock({ Self.locate(uuid, in: area, $0) }) else { throw notFound(uuid.uuidString, in: area) }
        return try RecordFormat.decode(
            recordBytes(at: location, in: file), maximumSize: configuration.maximumRecordSize, checksumVerified: location.isFrame
        )
    }

    /// The record bytes at `location`: one read, and for a whole frame its checks (whose
    /// checksum covers the record's bytes: decode them with `checksumVerified`).
    func recordBytes(at location: JournalIndex.Location, in file: JournalSegmentFile) throws -> Data {
        // Rebased: callers index the bytes from 0.
        Data(try recordBytes(location, in: file, from: try file.read(count: Int(location.length), at: location.offset)))
    }

    /// The record of `bytes`, read from `location` in `file`: for a whole frame, its body once
    /// its checks pass. A slice of `bytes`, not a copy (its indices are those of `bytes`).
    /// `checkingBody: false`: all but the checksum of the frame's body is checked (see
    /// ``forEachPendingRecord(plain:_:)``).
    func recordBytes(_ location: JournalIndex.Location, in file: JournalSegmentFile, from bytes: Data, checkingBody: Bool = true) throws -> Data {
        guard location.isFrame else { return bytes }
        let verified = bytes.withUnsafeBytes { raw in
            JournalFrame.verify(
                raw.bindMemory(to: UInt8.self), at: 0, salt: file.salt, maximumSize: configuration.maximumFrameSize, checkingBody: checkingBody
            )
        }
        switch verified {
        case .success(let frame):
            return bytes[(bytes.startIndex + frame.body.lowerBound)..<(bytes.startIndex + frame.body.upperBound)]
        case .failure(let rejection):
            throw PersistenceError(.corruptRecord, "The journal frame of a record no longer verifies (\(rejection)).", fileURL: URL(fileURLWithPath: file.path))
        }
    }

    func notFound(_ id: String, in area: JournalIndex.Area) -> PersistenceError {
        PersistenceError(.recordNotFound, "There is no \(area) record \(id).")
    }

    /// The identifier's `UUID`, when it is a library-generated identifier.
    static func uuid(_ id: String) -> UUID? {
        RecordIdentifier.uuid(id)
    }
}

extension [JournalStore.LocatedRecord] {
    /// Sorts the records by segment, then by offset: the order in which reads go forward.
    mutating func sortByPlace() {
        // Segment ordinals start at -1 (a segment that is gone) and offsets of a segment stay
        // far below 2⁴⁰ bytes: a key of 64 bits holds both; anything larger is sorted by
        // comparison.
        guard allSatisfy({ $0.offset >= 0 && $0.offset < 1 << 40 && $0.segment < 1 << 23 }) else {
            sort { ($0.segment, $0.offset) < ($1.segment, $1.offset) }
            return
        }
        sortByKey { UInt64(Int64($0.segment) + 1) << 40 | UInt64($0.offset) }
    }
}
