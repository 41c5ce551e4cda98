import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Compaction
// ==========
//
// When the sealed segments (every segment but the active one) hold at least
// `compactionMinimumSize` bytes and more than half of them are dead (frames of records since
// rewritten, moved or removed, removal frames, damaged bytes), compaction merges them:
//
// 1. Under the lock: the sealed segments S, and the index entries located in them (a snapshot).
// 2. Without the lock: each of those records is read (a whole frame is verified by its
//    checks, a batch's record by its own) and written as one put (pending) or moveToFailed
//    (failed) frame to `journal/compaction.tmp`, under a new salt; the file is flushed, renamed
//    to its segment name, and the journal directory flushed.
// 3. Under the lock: each copied record that still has the location it was copied from
//    moves to its new location; the others changed meanwhile, in the active segment, and keep
//    that. The new segment replaces S.
// 4. The segments of S are removed oldest first, the directory flushed after each.
//
// The ordering rule. The new segment is named (n, g + 1), where (n, g) is the last segment of
// S: it reads after every segment it replaces and before the active segment and any segment
// started since (their numbers are greater than n). So whatever a crash or a power cut leaves
// of steps 2 to 4, the state read is the same:
// - before the rename is durable, the new segment is absent (a temporary file is removed at
//   open) and S is whole: the state as before;
// - after it, S is applied first, then the new segment, then the rest. The new segment holds,
//   for every record live in S at the snapshot, its version in S; applying it after S changes
//   nothing. A change made after the snapshot is a frame in a later segment, applied after
//   the new one, so it wins: a removal of a record being copied stays a removal;
// - in step 4 the oldest segments go first, one directory flush each, so what remains of S is
//   always a suffix of it: every frame of the suffix is followed, in the suffix, by every later
//   change to its record, and a removal whose put is gone removes nothing. Open removes the
//   leftovers (segments older than a compaction segment and holding no live record).
//
// Writes never wait for a merge: steps 1 and 3 hold the lock for a pass over the index, and
// the writer keeps appending to the active segment meanwhile. A failure (a full disk, a record
// that no longer verifies) abandons the merge and removes the temporary file; nothing else
// has changed.

extension JournalStore {
    /// Seals the active segment when it holds frames, then merges every sealed segment into
    /// one, before returning.
    ///
    /// - Throws: ``PersistenceError`` when the store is closed or failed, or the merge fails
    ///   (nothing is lost then: the old segments stay).
    package func compact() throws {
        try state.withLock { state in
            try checkWritable(state)
            if let active = state.active, active.writer.size > Int64(JournalSegment.headerSize) {
                rollActiveSegment(&state)
            }
            try checkWritable(state)
        }
        try compactionQueue.sync {
            try merge()
        }
    }

    /// Starts a merge off the caller's thread when the sealed segments are large and mostly dead.
    func compactIfDue() {
        guard configuration.compactsAutomatically else { return }
        let isDue = state.withLock { state -> Bool in
            guard !state.isCompacting, !state.isClosed, state.failure == nil, let active = state.active else { return false }
            if !state.remembered.isEmpty { state.remembered.prune(before: configuration.clock()) }
            // From running totals: a large store has hundreds of segments, and this runs after
            // every change.
            let sealed = state.sizes.total - (state.sizes[active.file.name] ?? 0)
            let live = state.totalLiveBytes - state.liveBytes(of: active.file.name)
            assert(
                sealed == state.sizes.sum(where: { $0 != active.file.name })
                    && live == state.sizes.names.filter { $0 != active.file.name }.reduce(0) { $0 + state.liveBytes(of: $1) },
                "the running totals of the segments' sizes and live bytes drifted"
            )
            // A store whose every record has gone (its work drained) starts over: the active
            // segment is sealed and merged with the others into nothing. It does when sealed
            // segments are left (a compaction that ran while the last records were being
            // removed merged only some), or when the active segment alone has grown large.
            let drained = state.index.entries.isEmpty && state.remembered.isEmpty && (sealed > 0 || active.writer.size >= Int64(Self.drainedResetSize))
            guard drained || (sealed >= Int64(configuration.compactionMinimumSize) && (sealed - live) * 2 > sealed) else { return false }
            if drained { rollActiveSegment(&state) }
            state.isCompacting = true
            return true
        }
        guard isDue else { return }
        compactionQueue.async {
            let merged = (try? self.merge()) != nil
            self.state.withLock { $0.isCompacting = false }
            // Changes made meanwhile found a compaction running and started none (the last
            // removal of a draining store, say): look again.
            if merged { self.compactIfDue() }
        }
    }

    /// The size past which the active segment of a store with no records left (and no sealed
    /// segment) starts over: 256 KiB (a store that drains often, between every few operations,
    /// does not start a segment each time).
    static let drainedResetSize = 256 << 10

    /// What a merge copies.
    private struct Plan {
        var sealed: [JournalSegmentName]
        var target: JournalSegmentName
        var records: [(id: UUID, entry: JournalIndex.Entry, file: JournalSegmentFile)]
        /// The attempt markers whose frames are in the sealed segments, of pending records.
        var markers: [(id: UUID, marker: AttemptMarker)]
        /// The remembered keys whose frames are in the sealed segments.
        var remembered: [RememberedKeys.Entry]
    }

    /// Merges the sealed segments; runs on ``compactionQueue``.
    private func merge() throws {
        let fileSystem = configuration.fileSystem
        guard let plan = try state.withLock({ state -> Plan? in
            try checkWritable(state)
            guard let active = state.active else { return nil }
            let sealed = state.segments.keys.filter { $0 != active.file.name }.sorted()
            guard let last = sealed.last else { return nil }
            let members = Set(sealed)
            let records = state.index.entries.compactMap { id, entry -> (id: UUID, entry: JournalIndex.Entry, file: JournalSegmentFile)? in
                guard members.contains(entry.location.segment), let file = state.segments[entry.location.segment] else { return nil }
                return (id, entry, file)
            }
            let markers = state.attempts.compactMap { id, attempt -> (id: UUID, marker: AttemptMarker)? in
                guard members.contains(attempt.segment), state.index.entries[id]?.area == .pending else { return nil }
                return (id, attempt.marker)
            }
            let remembered = state.remembered.entries(in: members, at: configuration.clock())
            return Plan(
                sealed: sealed, target: JournalSegmentName(number: last.number, generation: last.generation + 1), records: records,
                markers: markers, remembered: remembered
            )
        }) else { return }

        // Nothing live in them (a drained store): the old segments just go, oldest first, so
        // that a removal never outlives the record it removes.
        if plan.records.isEmpty && plan.markers.isEmpty && plan.remembered.isEmpty {
            let retired = state.withLock { state in Self.forget(plan.sealed, in: &state) }
            for writer in retired { writer.close() }
            try removeSegments(plan.sealed)
            ensureReserve()
            return
        }

        // Step 2: copy.
        let temporaryPath = journalPath + "/" + JournalSegmentName.temporaryFileName
        let finalPath = journalPath + "/" + plan.target.fileName
        try? fileSystem.unlink(temporaryPath)
        let salt = JournalSegment.newSalt()
        var moves: [(id: UUID, from: JournalIndex.Location, to: JournalIndex.Location)] = []
        moves.reserveCapacity(plan.records.count)
        var markerBytes: Int64 = 0
        // The new segment's hint, written as its frames are (see `JournalStore+Hints`); nil
        // once a record's fields could not be read from its bytes (the segment is then read
        // at open), or when it could not be started.
        var hint = configuration.makesHints ? HintFileWriter(for: plan.target, journalPath: journalPath, fileSystem: fileSystem) : nil
        var typeIdentifiers: [String] = []
        var written: Int64 = 0
        do {
            let descriptor = try fileSystem.open(temporaryPath, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
            defer { try? fileSystem.close(descriptor) }
            var buffer = JournalSegment.header(salt: salt, number: plan.target.number)
            func drain() throws {
                try fileSystem.writeWhole(descriptor, buffer, at: written, path: temporaryPath)
                written += Int64(buffer.count)
                buffer.removeAll(keepingCapacity: true)
            }
            let ordered = plan.records.sorted { ($0.entry.location.segment, $0.entry.location.offset) < ($1.entry.location.segment, $1.entry.location.offset) }
            for (id, entry, file) in ordered {
                let record = try recordBytes(at: entry.location, in: file)
                if !entry.location.isFrame {
                    // A batch's record: verified by its own checks before it is copied.
                    _ = try RecordFormat.decode(record, maximumSize: configuration.maximumRecordSize)
                }
                let frame = JournalFrame(kind: entry.area == .pending ? .put : .moveToFailed, body: record)
                let offset = written + Int64(buffer.count)
                try frame.append(to: &buffer, salt: salt, maximumSize: configuration.maximumFrameSize)
                moves.append((id, entry.location, .init(segment: plan.target, offset: offset, length: Int32(frame.size), isFrame: true)))
                if hint != nil {
                    if let fields = try? Self.indexFields(record, maximumSize: configuration.maximumRecordSize, typeIdentifiers: &typeIdentifiers) {
                        // (`record` was verified above: by its frame's checks, or by its own.)
                        hint?.append(.record(Self.hintRecord(
                            kind: entry.area == .pending ? .put : .moveToFailed, offset: offset, length: Int32(frame.size), fields: fields,
                            record: record, maximumRecordSize: configuration.maximumRecordSize, typeIdentifiers: &typeIdentifiers
                        )))
                    } else {
                        hint?.abandon()
                        hint = nil
                    }
                }
                if buffer.count >= 1 << 20 { try drain() }
            }
            // The frames that keep no record: attempt markers, then remembered keys.
            func appendMarker(_ frame: JournalFrame) throws {
                hint?.append(.frame(offset: written + Int64(buffer.count), kind: frame.kind, body: frame.body))
                try frame.append(to: &buffer, salt: salt, maximumSize: configuration.maximumFrameSize)
                markerBytes += Int64(frame.size)
                if buffer.count >= 1 << 20 { try drain() }
            }
            for (id, marker) in plan.markers {
                try appendMarker(JournalFrame(kind: .attempt, body: Self.attemptBody(id, marker)))
            }
            for entry in plan.remembered {
                try appendMarker(JournalFrame(kind: .retire, body: entry.retired.body))
            }
            try drain()
            if configuration.flushes { try fileSystem.synchronize(descriptor) }
        } catch {
            try? fileSystem.unlink(temporaryPath)
            throw PersistenceError(.writeFailed, "Compacting the journal failed; nothing was changed.", fileURL: URL(fileURLWithPath: temporaryPath), underlyingError: error)
        }
        let merged: JournalSegmentFile
        do {
            try fileSystem.rename(temporaryPath, finalPath)
            if configuration.flushes { try fileSystem.synchronizeDirectory(journalPath) }
            merged = try JournalSegmentFile.open(plan.target, path: finalPath, salt: salt, fileSystem: fileSystem)
        } catch {
            // The new segment may be there; it reads the same as what it replaces.
            throw PersistenceError(.writeFailed, "Compacting the journal failed after its new segment was written.", fileURL: URL(fileURLWithPath: finalPath), underlyingError: error)
        }

        // Step 3: install.
        let retired: [JournalWriter] = state.withLock { state in
            for move in moves {
                state.index.relocate(move.id, from: move.from, to: move.to)
            }
            state.segments[plan.target] = merged
            state.sizes[plan.target] = Int64(JournalSegment.headerSize) + moves.reduce(0) { $0 + Int64($1.to.length) } + markerBytes
            // Markers set since are in later segments and stay there; the merged ones now
            // read from the new segment; the rest (of records gone) are forgotten.
            let members = Set(plan.sealed)
            for (id, attempt) in state.attempts where members.contains(attempt.segment) {
                state.attempts[id]?.segment = plan.target
                if state.index.entries[id]?.area != .pending { state.attempts[id] = nil }
            }
            // Remembered keys copied move to the new segment; those that expired before the
            // copy are forgotten with their segments.
            for entry in plan.remembered {
                state.remembered.relocate(key: entry.retired.key, id: entry.retired.id, from: entry.segment, to: plan.target)
            }
            return Self.forget(plan.sealed, in: &state)
        }
        for writer in retired { writer.close() }
        ensureReserve()

        // Step 4: remove the old segments, oldest first.
        try removeSegments(plan.sealed)
        if let hint { installHint(hint, salt: salt, validEnd: written) }
    }

    /// Forgets merged (or dead) segments and counts the compaction; returns their writers, to
    /// be closed outside the lock.
    private static func forget(_ segments: [JournalSegmentName], in state: inout State) -> [JournalWriter] {
        var retired: [JournalWriter] = []
        for name in segments {
            if let writer = state.forgetSegment(name) { retired.append(writer) }
        }
        state.compactions += 1
        return retired
    }

    /// Removes segments oldest first, each removal made durable before the next, so that a
    /// removal frame never outlives the record it removes.
    private func removeSegments(_ segments: [JournalSegmentName]) throws {
        let fileSystem = configuration.fileSystem
        for name in segments.sorted() {
            // (Its hint with it. A crash between the two leaves either alone, which is
            // harmless: a hint without its segment is removed at open.)
            try? fileSystem.unlink(journalPath + "/" + name.hintFileName)
            try fileSystem.unlink(journalPath + "/" + name.fileName)
            if configuration.flushes { try fileSystem.synchronizeDirectory(journalPath) }
        }
    }
}
