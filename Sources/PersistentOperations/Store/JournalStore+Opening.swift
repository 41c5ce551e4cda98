import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Opening the journal: every segment in (number, generation) order, one sequential read each,
// its frames applied in order to the index. Then:
// - damaged bytes (a corrupt region, a torn tail, a record that does not decode) are copied to `<root>/quarantine/journal-<segment>-<offset>.bytes`, with a
//   `.reason` file beside them, and reported; a corrupt frame never hides a neighbour, since
//   the scan finds every intact frame after damage;
// - the torn tail of the last segment is cut off (its bytes quarantined first) and the writer
//   appends where the valid frames end; a last segment that never got a valid header (its
//   creation was cut short, so none of its frames was acknowledged) is removed;
// - segments that a compaction replaced but a crash left behind (older than a compaction
//   segment, and holding no live record) are removed, oldest first;
// - a temporary compaction file is removed.

extension JournalStore {
    /// The state and report of a store after open.
    struct Opened {
        var state: State
        var report: OpenReport
        /// The sealed segments that have no hint yet (see `JournalStore+Hints`).
        var unhinted: [JournalSegmentName] = []
    }

    /// How many times a read-only open starts over when a segment it listed is gone.
    static let readOnlyOpenAttempts = 10

    /// A segment listed by a read-only open was removed before it could be opened: the owner
    /// compacted the journal meanwhile (a compaction removes the segments it replaced).
    private struct SegmentVanished: Error {
        var path: String
        var underlying: any Error
    }

    static func open(root: String, journalPath: String, quarantinePath: String, configuration: Configuration) throws -> Opened {
        guard configuration.isReadOnly else {
            return try openOnce(root: root, journalPath: journalPath, quarantinePath: quarantinePath, configuration: configuration)
        }
        // A read-only open takes no lock: the owner may compact while it reads, removing a
        // segment it listed. What it read of the others is dropped (their descriptors closed)
        // and it starts over from a new listing, which holds the compaction's segment instead.
        var vanished: SegmentVanished?
        for _ in 0..<readOnlyOpenAttempts {
            do {
                return try openOnce(root: root, journalPath: journalPath, quarantinePath: quarantinePath, configuration: configuration)
            } catch let error as SegmentVanished {
                vanished = error
            }
        }
        throw PersistenceError(
            .readFailed,
            "Journal segments kept disappearing while the store was read (\(readOnlyOpenAttempts) attempts): the app that holds it is compacting without pause. Try again.",
            fileURL: vanished.map { URL(fileURLWithPath: $0.path) }, underlyingError: vanished?.underlying
        )
    }

    private static func openOnce(root: String, journalPath: String, quarantinePath: String, configuration: Configuration) throws -> Opened {
        let fileSystem = configuration.fileSystem
        var state = State()
        var report = OpenReport()
        if configuration.isReadOnly {
            state.failure = PersistenceError(.storeNotWritable, "The store was opened read-only.", fileURL: URL(fileURLWithPath: root))
            // A store that has no journal yet (today's layout, not migrated) has no records in one.
            if (try? fileSystem.linkStatus(journalPath))?.kind != .directory { return Opened(state: state, report: report) }
        } else {
            for path in [root, journalPath, quarantinePath] {
                try createDirectory(path, configuration: configuration)
            }
        }
        let quarantine = Quarantine(path: quarantinePath, configuration: configuration)
        let names: [String]
        do {
            names = try fileSystem.contentsOfDirectory(journalPath)
        } catch {
            throw PersistenceError(.readFailed, "Cannot list the journal directory.", fileURL: URL(fileURLWithPath: journalPath), underlyingError: error)
        }
        if names.contains(JournalSegmentName.temporaryFileName), !configuration.isReadOnly {
            try? fileSystem.unlink(journalPath + "/" + JournalSegmentName.temporaryFileName)
        }
        let segments = names.compactMap(JournalSegmentName.init(fileName:)).sorted()
        let hinted = Set(names.compactMap(JournalSegmentName.init(hintFileName:)))
        if !configuration.isReadOnly {
            for name in names where name.hasSuffix("." + JournalHint.fileExtension + JournalSegmentName.hintTemporarySuffix) {
                try? fileSystem.unlink(journalPath + "/" + name)
            }
        }
        var lastScan: (name: JournalSegmentName, scan: JournalSegmentScan, size: Int)?
        // Segments are read, verified and their records peeked on a thread of their own, one
        // ahead of this one, which indexes them (see `ReadAhead`): opening a million records
        // takes about half the time on two cores.
        let pages = MappedPages()
        defer { pages.close() }
        let typeIdentifiers = InternedStrings()
        let reader = ReadAhead(count: segments.count, name: "PersistentOperations.open") { index in
            // A sealed segment's hint instead of the segment, when it holds. (Never the last
            // segment's: it is the one appended to.)
            if index < segments.count - 1, hinted.contains(segments[index]),
               let (hint, file) = readHint(for: segments[index], journalPath: journalPath, configuration: configuration) {
                return ReadSegment(file: file, bytes: Data(), scan: JournalSegmentScan(), peeked: [], hint: hint)
            }
            let path = journalPath + "/" + segments[index].fileName
            return try read(segments[index], journalPath: journalPath, configuration: configuration, typeIdentifiers: &typeIdentifiers.strings) { count in
                try pages.bytes(count, path: path)
            }
        }
        defer { reader.finish() }
        for name in segments {
            let read = try reader.next()
            let bytes = read.bytes
            let scan = read.scan
            state.segments[name] = read.file
            state.sizes[name] = read.hint?.validEnd ?? Int64(scan.validEnd(segmentSize: bytes.count))
            if let hint = read.hint {
                state.hinted.insert(name)
                for entry in hint.entries {
                    applyHinted(entry, in: name, to: &state, report: &report, quarantine: quarantine)
                }
            }
            for (located, peeked) in zip(scan.frames, read.peeked) {
                apply(located, peeked: peeked, in: name, to: &state, report: &report, quarantine: quarantine, segmentBytes: bytes)
            }
            for region in scan.corruptRegions {
                report.quarantined.append(quarantine.keep(bytes[region.range], segment: name, offset: region.offset, reason: region.reason))
            }
            if let tail = scan.tornTail {
                let reason = "torn tail: " + tail.reason
                if name == segments.last {
                    // The write a crash interrupted (a kill can cut a large write short), never
                    // acknowledged: cut off, and not kept, or every such crash would leave a file.
                    report.cutOff.append(.init(name: "\(name.fileName)@\(tail.offset)", reason: reason, code: .corruptRecord))
                } else {
                    // In a segment sealed (flushed whole) since: damage.
                    report.quarantined.append(quarantine.keep(bytes[tail.range], segment: name, offset: tail.offset, reason: reason))
                }
            }
            if name == segments.last { lastScan = (name, scan, bytes.count) }
            if name == segments.first, segments.count > 1, let size = state.sizes[name], size > 0 {
                // Room for as many records as the first segment suggests the others hold, so
                // that the index is not grown, and every entry moved, again and again.
                let totalBytes = segments.reduce(0) { total, segment in
                    total + Int((try? fileSystem.linkStatus(journalPath + "/" + segment.fileName).size) ?? 0)
                }
                let estimate = Double(state.index.entries.count) * Double(totalBytes) / Double(size)
                state.index.reserveCapacity(Int(min(estimate * 1.02, Double(Int32.max))))
            }
        }
        // (Reserved from the segments' sizes, which count removed records too.)
        state.index.shrinkToFit()
        if configuration.isReadOnly {
            // Nothing was quarantined: what would have been is reported as skipped.
            report.skipped += report.quarantined
            report.quarantined = []
            return Opened(state: state, report: report)
        }
        if !report.skipped.isEmpty {
            state.failure = PersistenceError(
                .storeNotWritable,
                "The journal holds records of a newer format; it was opened read-only. Open the store with a newer version of the library."
            )
        }
        guard state.failure == nil else { return Opened(state: state, report: report) }
        // Hints whose segment is gone, and the hint of the segment appended to from now on
        // (removed, durably, before anything is appended to it).
        var removedHint = false
        for name in hinted where state.segments[name] == nil || name == segments.last {
            removedHint = (try? fileSystem.unlink(journalPath + "/" + name.hintFileName)) != nil || removedHint
            state.hinted.remove(name)
        }
        if removedHint, configuration.flushes { try? fileSystem.synchronizeDirectory(journalPath) }
        try startActiveSegment(after: lastScan, state: &state, report: &report, quarantine: quarantine, journalPath: journalPath, configuration: configuration)
        removeReplacedSegments(state: &state, journalPath: journalPath, configuration: configuration)
        let unhinted = state.segments.keys.filter { $0 != state.active?.file.name && !state.hinted.contains($0) }.sorted()
        return Opened(state: state, report: report, unhinted: unhinted)
    }

    /// Reads one segment: opens it, reads it whole, scans it and peeks the index fields of
    /// the records its frames hold, touching no state (an open runs it ahead, see
    /// ``ReadAhead``).
    static func read(
        _ name: JournalSegmentName, journalPath: String, configuration: Configuration, typeIdentifiers: inout [String],
        peeks: Bool = true, buffer: (Int) throws -> Data
    ) throws -> ReadSegment {
        let fileSystem = configuration.fileSystem
        let path = journalPath + "/" + name.fileName
        let descriptor: Int32
        let bytes: Data
        do {
            descriptor = try fileSystem.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0)
        } catch let error as SystemCallError where error.code == ENOENT && configuration.isReadOnly {
            throw SegmentVanished(path: path, underlying: error)
        } catch {
            throw PersistenceError(.readFailed, "Cannot open a journal segment.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        do {
            bytes = try JournalSegmentFile.readWhole(path, descriptor: descriptor, fileSystem: fileSystem, buffer: buffer)
        } catch {
            try? fileSystem.close(descriptor)
            throw PersistenceError(.readFailed, "Cannot read a journal segment.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        let scan: JournalSegmentScan
        do {
            scan = try JournalSegment.scan(bytes, maximumFrameSize: configuration.maximumFrameSize)
        } catch let error as PersistenceError {
            try? fileSystem.close(descriptor)
            throw PersistenceError(error.code, error.message, fileURL: URL(fileURLWithPath: path))
        }
        let salt = scan.header?.salt ?? scan.frames.first.flatMap { frameSalt(bytes, at: $0.offset) }
        let file = JournalSegmentFile(name: name, path: path, salt: salt, descriptor: descriptor, fileSystem: fileSystem)
        let peeked = peeks ? scan.frames.map { peek($0, maximumRecordSize: configuration.maximumRecordSize, typeIdentifiers: &typeIdentifiers) } : []
        return ReadSegment(file: file, bytes: bytes, scan: scan, peeked: peeked, hint: nil)
    }

    /// A segment as ``read(_:journalPath:configuration:typeIdentifiers:)`` read it.
    struct ReadSegment: @unchecked Sendable {
        // (@unchecked: handed from the reading thread to the indexing one, then used by that
        // one alone; every part is a value except `file`, which is Sendable.)
        var file: JournalSegmentFile
        var bytes: Data
        var scan: JournalSegmentScan
        /// What ``peek(_:maximumRecordSize:typeIdentifiers:)`` read of each of `scan.frames`
        /// (empty when it was read with `peeks: false`).
        var peeked: [PeekedFrame]
        /// The segment's hint, read instead of it (`bytes`, `scan` and `peeked` are then empty).
        var hint: JournalHint?
    }

    /// The index fields of the records a frame holds, read ahead of indexing it.
    enum PeekedFrame {
        /// A put or a move to the failed area: its record's fields.
        case record(RecordFormat.IndexFields)
        /// A batch: the fields of each record and where the record lies in the frame's body
        /// (its offset from the body's start, and length).
        case batch([(fields: RecordFormat.IndexFields, offset: Int64, length: Int32)])
        /// A frame of another kind: read when it is applied.
        case other
        /// A frame whose records do not decode: the error.
        case failed(any Error)
    }

    static func peek(_ located: JournalSegmentScan.LocatedFrame, maximumRecordSize: Int, typeIdentifiers: inout [String]) -> PeekedFrame {
        let frame = located.frame
        do {
            switch frame.kind {
            case .put, .moveToFailed:
                return .record(try indexFields(frame.body, maximumSize: maximumRecordSize, typeIdentifiers: &typeIdentifiers))
            case .batch:
                // The parts as slices of the body: a segment's batches are not copied again.
                let parts = try frame.batchPartRanges()
                var records: [(fields: RecordFormat.IndexFields, offset: Int64, length: Int32)] = []
                records.reserveCapacity(parts.count)
                var offset: Int64 = 4
                for range in parts {
                    let part = frame.body[range]
                    records.append((try indexFields(part, maximumSize: maximumRecordSize, typeIdentifiers: &typeIdentifiers), offset + 4, Int32(part.count)))
                    offset += 4 + Int64(part.count)
                }
                return .batch(records)
            case .remove, .retire, .attempt:
                return .other
            }
        } catch {
            return .failed(error)
        }
    }

    /// Applies one verified frame to the index, with what ``peek(_:maximumRecordSize:typeIdentifiers:)`` read
    /// of it; a frame whose body does not decode changes nothing and is quarantined (a batch
    /// with one bad record: the whole batch).
    private static func apply(
        _ located: JournalSegmentScan.LocatedFrame, peeked: PeekedFrame, in segment: JournalSegmentName, to state: inout State,
        report: inout OpenReport, quarantine: Quarantine, segmentBytes: Data?
    ) {
        let frame = located.frame
        let bodyOffset = Int64(located.offset + JournalFrame.headerSize)
        func reject(_ error: Error) {
            let persistenceError = error as? PersistenceError
            let reason = "\(frame.kind) frame: " + (persistenceError?.message ?? "\(error)")
            if persistenceError?.code == .unsupportedFormatVersion {
                report.skipped.append(.init(name: "\(segment.fileName)@\(located.offset)", reason: reason, code: .unsupportedFormatVersion))
            } else {
                // (A hinted frame's bytes are its frame's body: the segment was not read.)
                let bytes = segmentBytes.map { $0[located.range] } ?? located.frame.body
                report.quarantined.append(quarantine.keep(bytes, segment: segment, offset: located.offset, reason: reason))
            }
        }
        do {
            if case .failed(let error) = peeked { throw error }
            switch frame.kind {
            case .put, .moveToFailed:
                guard case .record(let record) = peeked else { preconditionFailure("a record frame peeked as \(peeked)") }
                let location = JournalIndex.Location(segment: segment, offset: Int64(located.offset), length: Int32(frame.size), isFrame: true)
                state.index.set(record, area: frame.kind == .put ? .pending : .failed, location: location)
                state.lastEnqueueSequence = max(state.lastEnqueueSequence, record.enqueueSequence)
                if frame.kind == .moveToFailed { state.attempts[record.id] = nil }
            case .batch:
                // Every record was read before any is indexed: a batch counts whole or not at all.
                guard case .batch(let records) = peeked else { preconditionFailure("a batch frame peeked as \(peeked)") }
                for record in records {
                    let location = JournalIndex.Location(segment: segment, offset: bodyOffset + record.offset, length: record.length, isFrame: false)
                    state.index.set(record.fields, area: .pending, location: location)
                    state.lastEnqueueSequence = max(state.lastEnqueueSequence, record.fields.enqueueSequence)
                }
            case .remove:
                guard let id = removedIdentifier(frame.body) else { throw PersistenceError(.corruptRecord, "the body is not a record identifier") }
                state.index.remove(id)
                state.attempts[id] = nil
            case .retire:
                guard let retired = RetiredKey(body: frame.body) else { throw PersistenceError(.corruptRecord, "the body is not a retired idempotency key") }
                state.index.remove(retired.id)
                state.attempts[retired.id] = nil
                if retired.rememberedUntil > quarantine.configuration.clock() {
                    state.remembered.insert(retired, segment: segment, size: Int64(frame.size))
                }
            case .attempt:
                let (id, marker) = try attemptMarker(fromBody: frame.body)
                state.attempts[id] = marker.map { ($0, segment) }
            }
        } catch {
            reject(error)
        }
    }

    /// Applies what a hint says one frame (or record of a batch) does, as ``apply(_:peeked:in:to:report:quarantine:segmentBytes:)``
    /// applies the frame.
    private static func applyHinted(
        _ entry: JournalHint.Entry, in segment: JournalSegmentName, to state: inout State, report: inout OpenReport, quarantine: Quarantine
    ) {
        switch entry {
        case .record(let record):
            let location = JournalIndex.Location(segment: segment, offset: record.offset, length: record.length, isFrame: record.kind != .batchPart)
            state.index.set(record.fields, area: record.kind == .moveToFailed ? .failed : .pending, location: location)
            state.lastEnqueueSequence = max(state.lastEnqueueSequence, record.fields.enqueueSequence)
            if record.kind == .moveToFailed { state.attempts[record.fields.id] = nil }
        case .frame(let offset, let kind, let body):
            let located = JournalSegmentScan.LocatedFrame(frame: JournalFrame(kind: kind, body: body), offset: Int(offset))
            apply(located, peeked: .other, in: segment, to: &state, report: &report, quarantine: quarantine, segmentBytes: nil)
        }
    }

    /// What the index needs of a record whose frame verified: read directly when it can be
    /// (``RecordFormat/indexFields(of:)``), else from the record decoded in full, which throws
    /// what is wrong with it. The rest of the record is verified when it is loaded.
    static func indexFields(_ body: Data, maximumSize: Int, typeIdentifiers: inout [String]) throws -> RecordFormat.IndexFields {
        if body.count <= maximumSize, let fields = RecordFormat.indexFields(of: body, typeIdentifiers: &typeIdentifiers) { return fields }
        let record = try RecordFormat.decode(body, maximumSize: maximumSize)
        guard let id = RecordIdentifier.uuid(record.id) else {
            throw PersistenceError(.corruptRecord, "the record's identifier is not a library-generated identifier")
        }
        return RecordFormat.IndexFields(record, id: id)
    }

    /// The salt written in the frame at `offset`.
    private static func frameSalt(_ bytes: Data, at offset: Int) -> UInt32? {
        bytes.withUnsafeBytes { raw in
            let buffer = raw.bindMemory(to: UInt8.self)
            guard offset + 8 <= buffer.count else { return nil }
            return UInt32(buffer.bigEndianValue(at: offset + 4, width: 4))
        }
    }

    /// The identifier a removal frame names.
    static func removedIdentifier(_ body: Data) -> UUID? {
        guard let id = String(data: body, encoding: .utf8) else { return nil }
        return uuid(id)
    }

    /// Makes the last segment the active one (its torn tail cut off), or starts a new one
    /// when there is none, it is full, its header is damaged, or compaction wrote it.
    private static func startActiveSegment(
        after last: (name: JournalSegmentName, scan: JournalSegmentScan, size: Int)?, state: inout State,
        report: inout OpenReport, quarantine: Quarantine, journalPath: String, configuration: Configuration
    ) throws {
        let fileSystem = configuration.fileSystem
        if let last, let header = last.scan.header, last.name.generation == 0,
           last.scan.validEnd(segmentSize: last.size) < configuration.segmentSize {
            let path = journalPath + "/" + last.name.fileName
            let end = last.scan.validEnd(segmentSize: last.size)
            do {
                let descriptor = try fileSystem.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0)
                if let tail = last.scan.tornTail {
                    do {
                        try fileSystem.truncate(descriptor, Int64(end))
                        if configuration.flushes { try fileSystem.synchronizeData(descriptor) }
                    } catch {
                        try? fileSystem.close(descriptor)
                        throw error
                    }
                    report.truncatedBytes = tail.count
                }
                // Zeros after the frames (the writer's filled-ahead space) are appended over.
                let allocated = last.scan.tornTail == nil ? last.size : end
                let writer = JournalWriter(
                    descriptor: descriptor, path: path, end: Int64(end), allocated: Int64(allocated), fileSystem: fileSystem,
                    flushes: configuration.flushes, flushDelay: configuration.flushDelay,
                    fillAhead: min(JournalWriter.defaultFillAhead, configuration.segmentSize)
                )
                state.active = ActiveSegment(file: state.segments[last.name]!, writer: writer, salt: header.salt)
                return
            } catch {
                throw PersistenceError(.writeFailed, "Cannot reopen the journal's last segment.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
            }
        }
        var number: UInt64 = (last?.name.number ?? 0) + 1
        if let last, last.scan.header == nil, last.scan.frames.isEmpty, last.name.generation == 0 {
            // Its creation was cut short before it was synced: nothing in it was acknowledged.
            if last.size > 0 {
                report.cutOff.append(.init(name: "\(last.name.fileName)@0", reason: "a segment without a valid header or frame", code: .corruptRecord))
            }
            try? fileSystem.unlink(journalPath + "/" + last.name.fileName)
            state.segments[last.name] = nil
            state.sizes[last.name] = nil
            number = last.name.number
        }
        state.active = try createSegment(JournalSegmentName(number: number), journalPath: journalPath, configuration: configuration)
        state.segments[state.active!.file.name] = state.active!.file
        state.sizes[state.active!.file.name] = Int64(JournalSegment.headerSize)
    }

    /// Creates a segment: exclusive create (0600), its header written and flushed, the
    /// directory flushed, before any frame of it can be acknowledged.
    static func createSegment(_ name: JournalSegmentName, journalPath: String, configuration: Configuration) throws -> ActiveSegment {
        let fileSystem = configuration.fileSystem
        let path = journalPath + "/" + name.fileName
        let salt = JournalSegment.newSalt()
        do {
            let descriptor = try fileSystem.open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
            do {
                let header = JournalSegment.header(salt: salt, number: name.number)
                try header.withUnsafeBytes { bytes in
                    guard try fileSystem.writeAt(descriptor, bytes, 0) == bytes.count else { throw SystemCallError("pwrite", path: path, code: EIO) }
                }
                if configuration.flushes {
                    try fileSystem.synchronize(descriptor)
                    try fileSystem.synchronizeDirectory(journalPath)
                }
                let file = try JournalSegmentFile.open(name, path: path, salt: salt, fileSystem: fileSystem)
                let writer = JournalWriter(
                    descriptor: descriptor, path: path, end: Int64(JournalSegment.headerSize), fileSystem: fileSystem,
                    flushes: configuration.flushes, flushDelay: configuration.flushDelay,
                    fillAhead: min(JournalWriter.defaultFillAhead, configuration.segmentSize)
                )
                return ActiveSegment(file: file, writer: writer, salt: salt)
            } catch {
                try? fileSystem.close(descriptor)
                try? fileSystem.unlink(path)
                throw error
            }
        } catch {
            throw PersistenceError(.writeFailed, "Cannot create a journal segment.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
    }

    /// Removes the segments a compaction replaced that a crash left behind.
    private static func removeReplacedSegments(state: inout State, journalPath: String, configuration: Configuration) {
        guard let newest = state.segments.keys.filter({ $0.generation > 0 }).max() else { return }
        for name in state.segments.keys.sorted() where name < newest && state.liveBytes(of: name) == 0 {
            guard (try? configuration.fileSystem.unlink(journalPath + "/" + name.fileName)) != nil else { return }
            // (Its hint with it; one a crash leaves without its segment is removed at open.)
            try? configuration.fileSystem.unlink(journalPath + "/" + name.hintFileName)
            if configuration.flushes { try? configuration.fileSystem.synchronizeDirectory(journalPath) }
            _ = state.forgetSegment(name)
        }
    }

    /// Creates a directory of the store (0700) when it is missing, and its missing parents.
    private static func createDirectory(_ path: String, configuration: Configuration) throws {
        let fileSystem = configuration.fileSystem
        do {
            if let status = try? fileSystem.linkStatus(path) {
                guard status.kind == .directory else {
                    throw PersistenceError(.directoryUnavailable, "A journal store path exists but is not a directory.", fileURL: URL(fileURLWithPath: path))
                }
                return
            }
            let parent = (path as NSString).deletingLastPathComponent
            if parent != path, (try? fileSystem.linkStatus(parent)) == nil {
                try createDirectory(parent, configuration: configuration)
            }
            try fileSystem.makeDirectory(path, StoreLayout.directoryPermissions)
            try fileSystem.setPathPermissions(path, StoreLayout.directoryPermissions)
            if configuration.flushes { try fileSystem.synchronizeDirectory(parent) }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.directoryUnavailable, "Cannot create a journal store directory.", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
    }
}

/// Copies damaged bytes to the quarantine area, once: a name says where they were found.
struct JournalQuarantine: Sendable {
    let path: String
    let configuration: JournalStore.Configuration

    /// Keeps `bytes` (found in `segment` at `offset`) with `reason`, and returns the report
    /// entry. Writing is best effort: a failure is reported in the entry, and open goes on.
    func keep(_ bytes: Data, segment: JournalSegmentName, offset: Int, reason: String) -> LoadReport.Entry {
        let name = "journal-" + segment.fileName.replacingOccurrences(of: "." + JournalSegmentName.fileExtension, with: "") + "-\(offset).bytes"
        var entry = LoadReport.Entry(name: "\(segment.fileName)@\(offset)", reason: reason, code: .corruptRecord, quarantineName: name)
        guard !configuration.isReadOnly else {
            entry.quarantineName = nil
            return entry
        }
        let fileSystem = configuration.fileSystem
        if (try? fileSystem.linkStatus(path + "/" + name)) != nil { return entry }
        do {
            try write(Data(bytes), to: path + "/" + name + ".tmp")
            try write(Data((reason + "\n").utf8), to: path + "/" + name + StoreLayout.reasonSuffix)
            try fileSystem.rename(path + "/" + name + ".tmp", path + "/" + name)
            if configuration.flushes { try fileSystem.synchronizeDirectory(path) }
        } catch {
            entry.quarantineName = nil
            entry.reason += " (not kept in quarantine: \(error))"
        }
        return entry
    }

    /// Keeps a whole record file under `name` (or a free variant of it), with `reason`, and
    /// returns the name used. Unlike ``keep(_:segment:offset:reason:)`` a failure throws: the
    /// record leaves the journal only once its copy is safe.
    func keepRecord(_ bytes: Data, named name: String, reason: String) throws -> String {
        let fileSystem = configuration.fileSystem
        var chosen = name
        while (try? fileSystem.linkStatus(path + "/" + chosen)) != nil {
            chosen = name + "." + UUID().uuidString.prefix(8)
        }
        do {
            try write(bytes, to: path + "/" + chosen + ".tmp")
            try? write(Data((reason + "\n").utf8), to: path + "/" + chosen + StoreLayout.reasonSuffix)
            try fileSystem.rename(path + "/" + chosen + ".tmp", path + "/" + chosen)
            if configuration.flushes { try fileSystem.synchronizeDirectory(path) }
        } catch {
            try? fileSystem.unlink(path + "/" + chosen + ".tmp")
            throw PersistenceError(.writeFailed, "Could not copy the record to the quarantine area; it stays pending. \(error)", fileURL: URL(fileURLWithPath: path), underlyingError: error)
        }
        return chosen
    }

    private func write(_ data: Data, to path: String) throws {
        try JournalStore.writeFile(data, to: path, configuration: configuration)
    }
}

extension JournalStore {
    /// Creates (or truncates) the file at `path` with `data`, mode 0600, flushed when the
    /// store flushes: a file beside the segments (the space reserve, a quarantined copy).
    static func writeFile(_ data: Data, to path: String, configuration: Configuration) throws {
        let fileSystem = configuration.fileSystem
        let descriptor = try fileSystem.open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
        defer { try? fileSystem.close(descriptor) }
        try fileSystem.writeWhole(descriptor, data, at: 0, path: path)
        if configuration.flushes { try fileSystem.synchronize(descriptor) }
    }
}

extension JournalStore {
    typealias Quarantine = JournalQuarantine
}
