import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Every change is one frame: checked against the index, written by the active segment's
// writer and applied to the index under the store's lock (so the journal's order is the
// index's order), then flushed outside the lock, where concurrent changes share the flush.

extension JournalStore {
    /// Stores a new pending record, durable (per ``Configuration/durability``) when it returns.
    ///
    /// - Throws: ``PersistenceError/Code/writeFailed`` when a record with this identifier
    ///   exists or the file system fails (nothing is then stored), the encoding errors of
    ///   ``RecordFormat/encode(_:maximumSize:formatVersion:)``, ``PersistenceError/Code/storeNotWritable``.
    package func add(_ record: OperationRecord) throws {
        let id = try identifier(record.id)
        try commit(.put, [record], flushes: true) { state in
            if state.index.entries[id] != nil {
                throw PersistenceError(.writeFailed, "A record with identifier \(record.id) already exists.")
            }
        }
    }

    /// Stores several new pending records in one frame: after a crash at any instant, all of
    /// them are there or none.
    ///
    /// - Throws: the errors of ``add(_:)``; nothing is stored then.
    package func addBatch(_ records: [OperationRecord]) throws {
        guard !records.isEmpty else { return }
        let ids = try records.map { try identifier($0.id) }
        guard Set(ids).count == ids.count else {
            throw PersistenceError(.writeFailed, "A batch holds the same record identifier twice.")
        }
        try commit(.batch, records, flushes: true) { state in
            if let existing = ids.first(where: { state.index.entries[$0] != nil }) {
                throw PersistenceError(.writeFailed, "A record with identifier \(existing.uuidString) already exists.")
            }
        }
    }

    /// Replaces a pending record, such as after a retry.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when no pending record has this
    ///   identifier, and the errors of ``add(_:)``.
    package func update(_ record: OperationRecord) throws {
        let id = try identifier(record.id)
        try checkHasPayload(record)
        try commit(.put, [record], flushes: true) { state in
            guard state.index.entries[id]?.area == .pending else { throw self.notFound(record.id, in: .pending) }
        }
    }

    /// Removes a pending record, after its operation succeeded or was cancelled.
    ///
    /// The removal is written before this returns (a process crash keeps it) and flushed by
    /// the next change's flush or within ``Configuration/flushDelay``, unless `synchronizes`
    /// or ``Configuration/strictRemovals`` asks for it to be flushed before this returns (as
    /// `RecordStore.removePending(id:synchronizes:)` does for a dependent that must never
    /// outlive its prerequisite on disk).
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, ``PersistenceError/Code/writeFailed``.
    package func removePending(id: String, synchronizes: Bool = false) throws {
        guard let uuid = Self.uuid(id) else { throw notFound(id, in: .pending) }
        try commitRemoval(uuid, flushes: synchronizes || configuration.strictRemovals) { state in
            guard state.index.entries[uuid]?.area == .pending else { throw self.notFound(id, in: .pending) }
        }
    }

    /// Moves a pending record to the failed area with `reason`, in one frame, and returns it
    /// as stored there (its batch and next-attempt date dropped).
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` and the errors of ``add(_:)``.
    package func moveToFailed(_ record: OperationRecord, reason: String) throws -> OperationRecord {
        let id = try identifier(record.id)
        try checkHasPayload(record)
        var failed = record
        failed.failureReason = reason
        failed.nextAttemptAt = nil
        failed.batchID = nil
        try commit(.moveToFailed, [failed], flushes: true) { state in
            guard state.index.entries[id]?.area == .pending else { throw self.notFound(record.id, in: .pending) }
        }
        return failed
    }

    /// Moves a failed record back to the pending area with a fresh retry budget (as
    /// `RecordStore.requeueFailed(id:)` does), and returns it as stored there.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, the errors of ``add(_:)``.
    package func requeueFailed(id: String) throws -> OperationRecord {
        var record = try readFailed(id: id)
        let uuid = try identifier(id)
        record.failureReason = nil
        record.failedPrerequisite = nil
        record.numberOfRetries = 0
        record.nextAttemptAt = nil
        record.attemptsInFlight = 0
        record.expiresAt = nil
        record.isHoldingLane = false
        try commit(.put, [record], flushes: true) { state in
            guard state.index.entries[uuid]?.area == .failed else { throw self.notFound(id, in: .failed) }
        }
        return record
    }

    /// Deletes a failed record for good (a removal frame that rides along, as
    /// ``removePending(id:)``).
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, ``PersistenceError/Code/writeFailed``.
    package func purgeFailed(id: String) throws {
        guard let uuid = Self.uuid(id) else { throw notFound(id, in: .failed) }
        try commitRemoval(uuid, flushes: configuration.strictRemovals) { state in
            guard state.index.entries[uuid]?.area == .failed else { throw self.notFound(id, in: .failed) }
        }
    }

    /// Re-queues every failed record (see ``requeueFailed(id:)``) and returns them in run order.
    package func requeueAllFailed() throws -> [OperationRecord] {
        let report = try loadFailed()
        return try report.records.map { try requeueFailed(id: $0.id) }.sorted(by: OperationRecord.runsBefore)
    }

    /// Deletes every failed record and returns how many were deleted.
    @discardableResult
    package func purgeAllFailed() throws -> Int {
        let ids = state.withLock { state in state.index.entries.filter { $0.value.area == .failed }.map(\.key) }
        for id in ids { try purgeFailed(id: id.uuidString) }
        return ids.count
    }

    /// Stores records read from another layout (a migration): every record whose identifier
    /// the journal does not hold yet, pending ones in batch frames, failed ones in move
    /// frames, flushed once at the end. Returns how many were stored.
    ///
    /// Calling it again with the same records after a crash stores only those still missing,
    /// so a migration interrupted at any instant is finished by running it again.
    @discardableResult
    package func importRecords(pending: [OperationRecord], failed: [OperationRecord]) throws -> Int {
        let known = state.withLock { state in Set(state.index.entries.keys) }
        let newPending = pending.filter { Self.uuid($0.id).map { !known.contains($0) } ?? false }
        let newFailed = failed.filter { Self.uuid($0.id).map { !known.contains($0) } ?? false }
        var chunk: [OperationRecord] = []
        var chunkSize = 0
        func writeChunk() throws {
            guard !chunk.isEmpty else { return }
            try commit(.batch, chunk, flushes: false) { _ in }
            chunk = []
            chunkSize = 0
        }
        for record in newPending {
            chunk.append(record)
            chunkSize += record.payload.count + 512
            if chunkSize >= Self.importChunkSize { try writeChunk() }
        }
        try writeChunk()
        for record in newFailed {
            try commit(.moveToFailed, [record], flushes: false) { _ in }
        }
        if configuration.flushes, let writer = state.withLock({ $0.active?.writer }) {
            try writer.flush()
        }
        return newPending.count + newFailed.count
    }

    /// The size past which an import starts another batch frame.
    static let importChunkSize = 4 << 20

    /// Moves a pending record whose payload cannot be used to the quarantine area, as a record
    /// file (`<id>.record`, or with a suffix when taken) with a `.reason` file, and returns its
    /// name there. The copy is flushed before the record leaves the journal (with a flushed
    /// removal), so a cut at any instant keeps it in one place or both.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, ``PersistenceError/Code/writeFailed``.
    package func quarantinePending(id: String, reason: String) throws -> String {
        let uuid = try identifier(id)
        let bytes = try state.withLock { state -> (JournalIndex.Location, JournalSegmentFile) in
            try checkWritable(state)
            guard let entry = state.index.entries[uuid], entry.area == .pending,
                  let file = state.segments[entry.location.segment] else { throw self.notFound(id, in: .pending) }
            return (entry.location, file)
        }
        // The bytes as they are, verified or not: a record is quarantined because it cannot be used.
        let recordBytes: Data
        if let verified = try? self.recordBytes(at: bytes.0, in: bytes.1) {
            recordBytes = verified
        } else {
            recordBytes = try bytes.1.read(count: Int(bytes.0.length), at: bytes.0.offset)
        }
        let name = try Quarantine(path: quarantinePath, configuration: configuration)
            .keepRecord(recordBytes, named: StoreLayout.fileName(ofRecord: id), reason: reason)
        try commitRemoval(uuid, flushes: true) { state in
            guard state.index.entries[uuid]?.area == .pending else { throw self.notFound(id, in: .pending) }
        }
        return name
    }

    // MARK: Machinery

    private func identifier(_ id: String) throws -> UUID {
        guard let uuid = Self.uuid(id) else {
            throw PersistenceError(.corruptRecord, "Record identifier \"\(id)\" is not a library-generated UUID.")
        }
        return uuid
    }

    private func checkHasPayload(_ record: OperationRecord) throws {
        guard !record.payload.isEmpty else {
            throw PersistenceError(.writeFailed, "Refused to write record \(record.id) without its payload; the stored record is unchanged.")
        }
    }

    /// Writes `records` as one frame of `kind` (a batch frame holds several) and indexes them.
    private func commit(_ kind: JournalFrame.Kind, _ records: [OperationRecord], flushes: Bool, check: (inout State) throws -> Void) throws {
        let ids = try records.map { try identifier($0.id) }
        let maximumRecordSize = configuration.maximumRecordSize
        let encode: @Sendable (Int) throws -> Data = {
            try RecordFormat.encode(records[$0], maximumSize: maximumRecordSize, formatVersion: records[$0].journalFormatVersion)
        }
        // A batch's records are encoded on several cores at once, into a buffer a chunk,
        // written one after another.
        let frame = kind == .batch
            ? try JournalFrame.batchPieces(records.count, encodePart: encode)
            : JournalFrame(kind: kind, body: try encode(0)).pieces
        try append(frame, flushes: flushes, check: check) { state, segment, offset, size in
            if kind == .batch {
                var partOffset = offset + Int64(JournalFrame.headerSize) + 4
                for index in records.indices {
                    let length = frame.partLengths[index]
                    let location = JournalIndex.Location(segment: segment, offset: partOffset + 4, length: Int32(length), isFrame: false)
                    state.index.set(.init(records[index], id: ids[index]), area: .pending, location: location)
                    partOffset += 4 + Int64(length)
                }
            } else {
                let location = JournalIndex.Location(segment: segment, offset: offset, length: Int32(size), isFrame: true)
                let record = records[0]
                state.index.set(.init(record, id: ids[0]), area: kind == .put ? .pending : .failed, location: location)
                if kind == .moveToFailed { state.attempts[ids[0]] = nil }
            }
            for index in records.indices {
                state.lastEnqueueSequence = max(state.lastEnqueueSequence, records[index].enqueueSequence)
            }
        }
    }

    /// Removes record `id`: a removal frame, or a retire frame when the record has an
    /// idempotency key to remember (for ``Configuration/idempotencyWindow`` from now).
    private func commitRemoval(_ id: UUID, flushes: Bool, check: (inout State) throws -> Void) throws {
        var retired: RetiredKey?
        try append(flushes: flushes, frame: { state in
            try check(&state)
            if configuration.idempotencyWindow > 0, let keyed = state.index.idempotencyKey(of: id) {
                let until = configuration.clock().addingTimeInterval(configuration.idempotencyWindow)
                retired = RetiredKey(id: id, sequence: keyed.sequence, rememberedUntil: until, key: keyed.key)
                return JournalFrame(kind: .retire, body: retired!.body).pieces
            }
            return JournalFrame(kind: .remove, body: Data(id.uuidString.utf8)).pieces
        }) { state, segment, _, size in
            state.index.remove(id)
            // Its attempts are over.
            state.attempts[id] = nil
            if let retired { state.remembered.insert(retired, segment: segment, size: Int64(size)) }
        }
    }

    /// The records stored with idempotency key `key` (pending or failed) and those removed
    /// that the journal still remembers it for, by enqueue sequence.
    package func records(withIdempotencyKey key: String) -> [String] {
        let now = configuration.clock()
        return state.withLock { state -> [(UInt64, UUID)] in
            let stored = (state.index.recordsByIdempotencyKey[key] ?? []).compactMap { id in
                state.index.idempotencyKey(of: id).map { ($0.sequence, id) }
            }
            return stored + state.remembered.records(forKey: key, at: now).map { ($0.sequence, $0.id) }
        }
        .sorted { $0.0 < $1.0 }.map(\.1.uuidString)
    }

    /// Checks, writes and applies `frame` under the lock, then flushes it (when `flushes`)
    /// without the lock, and starts a compaction when one is due. A frame that is not flushed
    /// is flushed by the next flush, or within ``Configuration/flushDelay`` when
    /// `schedulesFlush` (otherwise only by the next flush anyone asks for).
    func append(
        _ frame: JournalFrame, flushes: Bool, schedulesFlush: Bool = true, check: (inout State) throws -> Void,
        apply: (inout State, JournalSegmentName, Int64, Int) -> Void
    ) throws {
        try append(frame.pieces, flushes: flushes, schedulesFlush: schedulesFlush, check: check, apply: apply)
    }

    /// ``append(_:flushes:schedulesFlush:check:apply:)`` of a frame in pieces.
    func append(
        _ frame: JournalFrame.Pieces, flushes: Bool, schedulesFlush: Bool = true, check: (inout State) throws -> Void,
        apply: (inout State, JournalSegmentName, Int64, Int) -> Void
    ) throws {
        try append(flushes: flushes, schedulesFlush: schedulesFlush, frame: { state in
            try check(&state)
            return frame
        }, apply: apply)
    }

    /// ``append(_:flushes:schedulesFlush:check:apply:)`` of the frame `frame` makes under the
    /// lock, after the checks of its own (it throws what they throw).
    func append(
        flushes: Bool, schedulesFlush: Bool = true, frame makeFrame: (inout State) throws -> JournalFrame.Pieces,
        apply: (inout State, JournalSegmentName, Int64, Int) -> Void
    ) throws {
        let (writer, segment) = try state.withLock { state -> (JournalWriter, JournalSegmentName) in
            try checkWritable(state)
            let frame = try makeFrame(&state)
            guard let active = state.active else { throw closed() }
            // Records written to a segment whose directory was moved or deleted meanwhile
            // would be lost with it: refuse, until it is back. (A removal or an attempt frame
            // is not checked: what it ends or marks is in that directory too. One `stat` less
            // for each of them: a lifecycle writes three frames.)
            let keepsRecords = frame.kind != .remove && frame.kind != .retire && frame.kind != .attempt
            guard !keepsRecords || (try? configuration.fileSystem.linkStatus(active.file.path)) != nil else {
                throw PersistenceError(
                    .directoryUnavailable,
                    "The store's journal directory was moved or deleted while the store was open. Restore it, or close and reopen the store to create it again.",
                    fileURL: URL(fileURLWithPath: journalPath)
                )
            }
            // A large body (a batch) is written after its header as it is, piece by piece: a
            // copy of it behind the header would double what a large `addOperations` holds
            // while it writes. A small one is copied, for one write instead of two.
            let header = try frame.header(salt: active.salt, maximumSize: configuration.maximumFrameSize)
            let (first, rest): (Data, [Data])
            if frame.size - JournalFrame.headerSize >= Self.bodyWrittenApartFrom {
                (first, rest) = (Data(header), frame.body)
            } else {
                var whole = Data(capacity: frame.size)
                whole.append(contentsOf: header)
                for piece in frame.body { whole.append(piece) }
                (first, rest) = (whole, [])
            }
            let offset: Int64
            let durability: JournalWriter.Durability = schedulesFlush ? .written : .writtenUnscheduled
            do {
                offset = try active.writer.append(first, then: rest, durability: durability)
            } catch let error as PersistenceError where Self.isDiskFull(error) && frame.kind.endsWork && releaseReserve(&state) {
                // A full disk must not keep work from completing: the reserve makes room.
                offset = try active.writer.append(first, then: rest, durability: durability)
            }
            apply(&state, active.file.name, offset, frame.size)
            if active.writer.size >= Int64(configuration.segmentSize) {
                rollActiveSegment(&state)
            }
            return (active.writer, active.file.name)
        }
        if flushes {
            do {
                try writer.flush()
            } catch {
                let sealed = state.withLock { state in
                    if state.durablySealed.contains(segment) { return true }
                    if state.failure == nil, !state.isClosed {
                        state.failure = error as? PersistenceError ?? PersistenceError(.writeFailed, "Flushing the journal failed.", underlyingError: error)
                    }
                    return false
                }
                if !sealed { throw error }
            }
        }
        compactIfDue()
    }

    /// The body size from which a frame's body is written apart from its header (two writes
    /// instead of one copy).
    static var bodyWrittenApartFrom: Int { 64 << 10 }

    /// Whether `error` is a write that failed for lack of space.
    static func isDiskFull(_ error: PersistenceError) -> Bool {
        (error.underlyingError as? SystemCallError).map { $0.code == ENOSPC || $0.code == EDQUOT } ?? false
    }

    /// Seals the active segment (flushing it) and starts the next. On failure the active
    /// segment stays and takes more frames; a failed flush fails the store.
    func rollActiveSegment(_ state: inout State) {
        guard let old = state.active else { return }
        old.writer.trim()
        do {
            try old.writer.flush()
        } catch {
            state.failure = error as? PersistenceError ?? PersistenceError(.writeFailed, "Flushing the journal failed.", underlyingError: error)
            return
        }
        let next = JournalSegmentName(number: old.file.name.number + 1)
        guard let segment = try? Self.createSegment(next, journalPath: journalPath, configuration: configuration) else { return }
        state.durablySealed.insert(old.file.name)
        state.sealedWriters[old.file.name] = old.writer
        state.sizes[old.file.name] = old.writer.size
        state.active = segment
        state.segments[next] = segment.file
        state.sizes[next] = Int64(JournalSegment.headerSize)
        // (Dispatched, not run: the hint is made on the compaction queue, without the lock.)
        hintSegmentsLater([old.file.name])
    }

    func checkWritable(_ state: State) throws {
        if state.isClosed { throw closed() }
        if let failure = state.failure { throw failure }
    }

    func closed() -> PersistenceError {
        PersistenceError(.storeNotWritable, "The journal store has been closed.", fileURL: directory)
    }
}
