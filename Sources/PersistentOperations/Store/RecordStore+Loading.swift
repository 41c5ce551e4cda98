import Foundation

extension RecordStore {
    /// What one directory entry turned out to be.
    enum EntryOutcome {
        case record(OperationRecord)
        /// Not usable; quarantined by a read-write store.
        case bad(reason: String, code: PersistenceError.Code)
        /// Written by a newer format version; left in place.
        case newerVersion(reason: String)
    }

    /// Reads every pending record, quarantining every entry that cannot be used.
    ///
    /// Each entry is opened without following symbolic links; directories, links and other
    /// special files, files over the size cap, and files that fail verification are moved to
    /// the quarantine area (a read-only store reports them in ``LoadReport/skipped`` instead).
    /// Records of a newer format version stay where they are. A record whose move to the
    /// failed area a crash interrupted is moved on.
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` or
    ///   ``PersistenceError/Code/directoryUnavailable`` when the directory cannot be listed, and
    ///   ``PersistenceError/Code/writeFailed`` when quarantining fails.
    package func loadPending() throws -> LoadReport {
        if configuration.engine == .journal {
            var records: [OperationRecord] = []
            var report = try loadPending(reservingCapacity: { records.reserveCapacity($0) }) { records.append($0) }
            report.records = records
            report.sortRecords()
            return report
        }
        return try loadArea(.pending, finishingMovesTo: .failed) { $0.failureReason != nil }
    }

    /// Reads every pending record like ``loadPending()``, but hands each readable record to
    /// `body` as it is read (in no particular order) instead of collecting them, so that a
    /// caller keeping only part of each never holds every record at once. `reserve` is first
    /// told how many entries the directory holds, at most the number of records to come. The
    /// returned report's ``LoadReport/records`` is empty. `plain`: for a caller that keeps no
    /// payload, takes the journal's plain records instead of `body`, as their fields (see
    /// ``JournalStore/forEachPendingRecord(plain:_:)``).
    package func loadPending(
        reservingCapacity reserve: (Int) -> Void = { _ in },
        plain: ((RecordFormat.PlainFields) throws -> Void)? = nil,
        each body: (OperationRecord) throws -> Void
    ) throws -> LoadReport {
        if let (journal, filesToo) = try readableJournal() {
            return try loadJournalPending(journal, filesToo: filesToo, reservingCapacity: reserve, plain: plain, each: body)
        }
        return try loadArea(.pending, finishingMovesTo: .failed, where: { $0.failureReason != nil }, reservingCapacity: reserve, each: body)
    }

    /// Loads the journal's pending records, with what open found; a read-only store of a
    /// store not completely migrated also reads the earlier layout's (the journal's copy wins).
    private func loadJournalPending(
        _ journal: JournalStore, filesToo: Bool, reservingCapacity reserve: (Int) -> Void, plain: ((RecordFormat.PlainFields) throws -> Void)?,
        each body: (OperationRecord) throws -> Void
    ) throws -> LoadReport {
        var report = LoadReport()
        var (findings, filesLeft) = state.withLock { state in
            defer { state.openFindings = [] }
            return (state.openFindings, state.filesLeft)
        }
        if access == .readOnly { findings = journal.openReport.skipped }
        reserve(journal.pendingCount)
        let unreadable = try journal.forEachPendingRecord(plain: plain, body)
        if filesToo {
            let fileReport = try loadArea(.pending, reservingCapacity: { _ in }) { record in
                if !journal.contains(id: record.id), record.failureReason == nil { try body(record) }
            }
            report.skipped += fileReport.skipped
        }
        if access == .readWrite {
            // A record the journal's open indexed but that does not decode in full: moved to
            // quarantine now, as open would have, so that it is reported once.
            let moved = unreadable.map { entry -> LoadReport.Entry in
                guard let name = try? journal.quarantinePending(id: entry.name, reason: entry.reason) else { return entry }
                return LoadReport.Entry(name: name, reason: entry.reason, code: entry.code)
            }
            report.quarantined = findings + moved
        } else {
            report.skipped += findings + unreadable
        }
        report.skipped += filesLeft
        if access == .readWrite { report.skipped += journal.openReport.skipped }
        return report
    }

    /// Hands every readable pending record to `body`, in no particular order, and changes
    /// nothing: an entry that cannot be used, or a record a crash left halfway to the failed
    /// area, is skipped (the next ``loadPending()`` quarantines or moves it). The records
    /// read count toward ``nextEnqueueSequence()`` like a load's.
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` or
    ///   ``PersistenceError/Code/directoryUnavailable`` when the directory cannot be listed.
    package func readPendingRecords(each body: (OperationRecord) throws -> Void) throws {
        if let (journal, filesToo) = try readableJournal() {
            try journal.forEachPendingRecord(body)
            guard filesToo else { return }
            try readPendingFiles { record in
                if !journal.contains(id: record.id) { try body(record) }
            }
            return
        }
        try readPendingFiles(each: body)
    }

    private func readPendingFiles(each body: (OperationRecord) throws -> Void) throws {
        var largest: UInt64 = 0
        for name in try listArea(.pending) where !StoreLayout.isTemporaryFileName(name) {
            guard case .record(let record) = inspectEntry(name, in: .pending) else { continue }
            largest = max(largest, record.enqueueSequence)
            if record.failureReason == nil { try body(record) }
        }
        state.withLock { state in
            state.lastEnqueueSequence = max(state.lastEnqueueSequence, largest)
            state.areasWithKnownEnqueueSequences.insert(.pending)
        }
    }

    /// The type and payload of one pending record, read again for building its operation:
    /// verified like a load, without decoding the record's other fields when it is in the
    /// journal (see ``readPending(id:)`` for what it throws).
    package func readPendingPayload(id: String) throws -> (typeIdentifier: String, payload: Data) {
        if let (journal, filesToo) = try readableJournal() {
            do {
                return try journal.readPendingPayload(id: id)
            } catch let error as PersistenceError where error.code == .recordNotFound && filesToo {
                // A read-only store of a store not completely migrated: the earlier layout's.
            }
        }
        let record = try readPending(id: id)
        return (record.typeIdentifier, record.payload)
    }

    /// The types and payloads of many pending records, as ``readPendingPayload(id:)`` reads
    /// each: those of the journal read together where they lie close.
    package func readPendingPayloads(ids: [String]) -> [String: Result<(typeIdentifier: String, payload: Data), any Error>] {
        if let (journal, filesToo) = try? readableJournal(), !filesToo {
            return journal.readPendingPayloads(ids: ids)
        }
        var results: [String: Result<(typeIdentifier: String, payload: Data), any Error>] = [:]
        for id in ids { results[id] = Result { try readPendingPayload(id: id) } }
        return results
    }

    /// Reads one pending record again, verified like a load.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when there is no such record, or
    ///   the reason it cannot be used (such as ``PersistenceError/Code/corruptRecord``).
    package func readPending(id: String) throws -> OperationRecord {
        if let (journal, filesToo) = try readableJournal() {
            do {
                return try journal.readPending(id: id)
            } catch let error as PersistenceError where error.code == .recordNotFound && filesToo {
                // A read-only store of a store not completely migrated: the earlier layout's.
            }
        }
        let path = try existingRecordPath(id, in: .pending)
        switch inspectEntry(StoreLayout.fileName(ofRecord: id), in: .pending) {
        case .record(let record):
            return record
        case .bad(let reason, let code):
            throw PersistenceError(code, reason, fileURL: url(path))
        case .newerVersion(let reason):
            throw PersistenceError(.unsupportedFormatVersion, reason, fileURL: url(path))
        }
    }

    /// Reads every record of the failed area, quarantining every entry that cannot be used.
    ///
    /// A record whose re-queueing a crash interrupted (no failure reason left) is moved on to
    /// the pending area.
    package func loadFailed() throws -> LoadReport {
        if let (journal, filesToo) = try readableJournal() {
            var report = try journal.loadFailed()
            if access == .readOnly {
                report.skipped += report.quarantined
                report.quarantined = []
            }
            if filesToo {
                let fileReport = try loadArea(.failed, reservingCapacity: { _ in }) { record in
                    if !journal.contains(id: record.id) { report.records.append(record) }
                }
                report.skipped += fileReport.skipped
                report.sortRecords()
            }
            return report
        }
        return try loadArea(.failed, finishingMovesTo: .pending) { $0.failureReason == nil }
    }

    /// Loads `area`, moving on to `destination` every record that `belongsThere` — the move
    /// between pending and failed that a crash interrupted after rewriting the record — and
    /// collects the others in run order. A read-only store reports those records where they are.
    private func loadArea(
        _ area: StoreLayout.Area,
        finishingMovesTo destination: StoreLayout.Area,
        where belongsThere: (OperationRecord) -> Bool
    ) throws -> LoadReport {
        var records: [OperationRecord] = []
        var report = try loadArea(area, finishingMovesTo: destination, where: belongsThere, reservingCapacity: { records.reserveCapacity($0) }) {
            records.append($0)
        }
        report.records = records
        report.sortRecords()
        return report
    }

    /// Loads `area` like the method above, handing each record that stays to `body`.
    func loadArea(
        _ area: StoreLayout.Area,
        finishingMovesTo destination: StoreLayout.Area,
        where belongsThere: (OperationRecord) -> Bool,
        reservingCapacity reserve: (Int) -> Void = { _ in },
        each body: (OperationRecord) throws -> Void
    ) throws -> LoadReport {
        var completedMoves: [OperationRecord] = []
        var report = try loadArea(area, reservingCapacity: reserve) { record in
            if access == .readWrite, belongsThere(record) {
                try move(record.id, from: area, to: destination)
                completedMoves.append(record)
            } else {
                try body(record)
            }
        }
        report.completedMoves = completedMoves
        return report
    }

    /// The names of the entries in the quarantine area, sorted (without their reason files).
    package func quarantinedEntryNames() throws -> [String] {
        try listArea(.quarantine).filter { !$0.hasSuffix(StoreLayout.reasonSuffix) }.sorted()
    }

    /// The entries in the quarantine area with the reason each was quarantined for, when known.
    package func quarantinedEntries() throws -> [(name: String, reason: String?)] {
        try quarantinedEntryNames().map { name in
            let path = layout.path(ofEntry: name + StoreLayout.reasonSuffix, in: .quarantine)
            guard case .contents(let data)? = try? file.read(path, maximumSize: 64 * 1024) else { return (name, nil) }
            return (name, String(decoding: data, as: UTF8.self))
        }
    }

    /// The record a quarantine entry holds (a pending record quarantined whole, such as one
    /// whose payload did not decode), verified.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when there is no such entry,
    ///   ``PersistenceError/Code/corruptRecord`` when it holds no readable record (damaged bytes
    ///   are not a record to re-queue).
    package func quarantinedRecord(named name: String) throws -> OperationRecord {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix("."), !name.hasSuffix(StoreLayout.reasonSuffix) else {
            throw PersistenceError(.recordNotFound, "\"\(name)\" is not the name of a quarantine entry.")
        }
        let path = layout.path(ofEntry: name, in: .quarantine)
        let contents: Data
        switch try? file.read(path, maximumSize: configuration.maximumRecordSize) {
        case .contents(let data)?:
            contents = data
        case .tooLarge?:
            throw PersistenceError(.corruptRecord, "The quarantine entry \(name) is larger than a record may be; it is not a record to re-queue.", fileURL: url(path))
        case .notRegularFile?, nil:
            throw PersistenceError(.recordNotFound, "The quarantine area has no entry named \(name).", fileURL: url(path))
        }
        do {
            return try RecordFormat.decode(contents, maximumSize: configuration.maximumRecordSize)
        } catch let error as PersistenceError {
            throw PersistenceError(
                .corruptRecord, "The quarantine entry \(name) is not a readable record (\(error.message)); it cannot be re-queued.",
                fileURL: url(path), underlyingError: error
            )
        }
    }

    /// Moves the record a quarantine entry holds back to the pending area, as it was stored
    /// (its retry count, dates and payload version kept; no attempt in flight), then deletes
    /// the entry and its reason; returns the record. The record is durable in the pending
    /// area before the entry goes: a crash in between leaves both, and a second re-queue of
    /// the entry is refused as a duplicate.
    ///
    /// - Throws: the errors of ``quarantinedRecord(named:)`` and ``add(_:)`` (a record with
    ///   its identifier is pending or failed already).
    package func requeueQuarantined(named name: String) throws -> OperationRecord {
        var record = try quarantinedRecord(named: name)
        record.attemptsInFlight = 0
        record.failureReason = nil
        try add(record)
        let path = layout.path(ofEntry: name, in: .quarantine)
        try? configuration.fileSystem.unlink(path + StoreLayout.reasonSuffix)
        do {
            try configuration.fileSystem.unlink(path)
            try synchronize(.quarantine, changing: path)
        } catch {
            throw writeFailed("The record is pending again, but its quarantine entry could not be removed.", path: path, error: error)
        }
        return record
    }

    /// Moves a readable pending record whose payload cannot be used (it does not decode as
    /// its type's payload) to the quarantine area, and returns its name there.
    package func quarantinePending(id: String, reason: String) throws -> String {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.quarantinePending(id: id, reason: reason) }
        _ = try existingRecordPath(id, in: .pending)
        return try quarantine(StoreLayout.fileName(ofRecord: id), from: .pending, reason: reason)
    }

    // MARK: Machinery

    /// Reads every entry of `area`, quarantining (or, read-only, skipping) the bad ones, and
    /// hands each readable record to `body`. `reserve` is told how many entries there are.
    func loadArea(
        _ area: StoreLayout.Area,
        reservingCapacity reserve: (Int) -> Void,
        each body: (OperationRecord) throws -> Void
    ) throws -> LoadReport {
        // A read-write load may quarantine and move entries: a change ``close()`` waits for.
        let change = access == .readWrite ? try beginChange() : nil
        defer { change?.end() }
        var report = LoadReport()
        let names = try listArea(area).sorted()
        // One allocation of the right size: growing by doubling would briefly hold two.
        reserve(names.count)
        var largest: UInt64 = 0
        for name in names where !StoreLayout.isTemporaryFileName(name) {
            switch inspectEntry(name, in: area) {
            case .record(let record):
                largest = max(largest, record.enqueueSequence)
                try body(record)
            case .newerVersion(let reason):
                report.skipped.append(LoadReport.Entry(name: name, reason: reason, code: .unsupportedFormatVersion))
            case .bad(let reason, let code):
                // Gone since the listing (removed by a change in flight): nothing to quarantine.
                if (try? configuration.fileSystem.linkStatus(layout.path(ofEntry: name, in: area))) == nil { continue }
                var entry = LoadReport.Entry(name: name, reason: reason, code: code)
                if access == .readWrite {
                    try checkWritable()
                    entry.quarantineName = try quarantine(name, from: area, reason: reason)
                    report.quarantined.append(entry)
                } else {
                    report.skipped.append(entry)
                }
            }
        }
        state.withLock { state in
            state.lastEnqueueSequence = max(state.lastEnqueueSequence, largest)
            state.areasWithKnownEnqueueSequences.insert(area)
        }
        return report
    }

    func listArea(_ area: StoreLayout.Area) throws -> [String] {
        // A journal store has the earlier layout's areas only when it was migrated from it.
        if configuration.engine == .journal, area != .quarantine, area != .attempts,
           (try? configuration.fileSystem.linkStatus(layout.path(of: area))) == nil {
            return []
        }
        do {
            return try configuration.fileSystem.contentsOfDirectory(layout.path(of: area))
        } catch {
            try checkAreaExists(area)
            throw PersistenceError(
                .readFailed, "Could not list the \(area.rawValue) directory: \(error).",
                fileURL: url(layout.path(of: area)), underlyingError: error
            )
        }
    }

    /// Reads and verifies one entry; never changes anything.
    func inspectEntry(_ name: String, in area: StoreLayout.Area) -> EntryOutcome {
        guard let id = StoreLayout.recordIdentifier(fromFileName: name) else {
            return .bad(reason: "unexpected entry name; records are named <UUID>.record", code: .corruptRecord)
        }
        let contents: Data
        do {
            switch try file.read(layout.path(ofEntry: name, in: area), maximumSize: configuration.maximumRecordSize) {
            case .contents(let data):
                contents = data
            case .notRegularFile(let kind):
                return .bad(reason: "not a regular file (\(kind))", code: .corruptRecord)
            case .tooLarge(let size):
                return .bad(
                    reason: "file is \(size) bytes, more than the maximum record size of \(configuration.maximumRecordSize) bytes",
                    code: .corruptRecord
                )
            }
        } catch {
            return .bad(reason: "cannot be read: \(error)", code: .readFailed)
        }
        do {
            let record = try RecordFormat.decode(contents, maximumSize: configuration.maximumRecordSize)
            guard record.id == id else {
                return .bad(reason: "the record's identifier \(record.id) does not match its file name", code: .corruptRecord)
            }
            return .record(record)
        } catch let error as PersistenceError where error.code == .unsupportedFormatVersion {
            return .newerVersion(reason: error.message)
        } catch let error as PersistenceError {
            return .bad(reason: error.message, code: error.code)
        } catch {
            return .bad(reason: "\(error)", code: .corruptRecord)
        }
    }

    /// Moves an entry, as it is, into the quarantine area under a name not yet taken there.
    ///
    /// The reason goes to a `<name>.reason` text file beside it, for the inspector; losing
    /// that file loses nothing else, so a failure to write it is ignored.
    private func quarantine(_ name: String, from area: StoreLayout.Area, reason: String) throws -> String {
        var quarantineName = name
        while (try? configuration.fileSystem.linkStatus(layout.path(ofEntry: quarantineName, in: .quarantine))) != nil {
            quarantineName = name + "." + UUID().uuidString.prefix(8)
        }
        try? file.replaceContents(
            of: layout.path(ofEntry: quarantineName + StoreLayout.reasonSuffix, in: .quarantine),
            with: Data(reason.utf8), synchronizes: false
        )
        try moveEntry(name, from: area, to: .quarantine, as: quarantineName)
        return quarantineName
    }

    /// The largest enqueue sequence among the readable records of `areas`.
    func largestStoredEnqueueSequence(in areas: [StoreLayout.Area]) -> UInt64 {
        var largest: UInt64 = 0
        for area in areas {
            let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: area))) ?? []
            for name in names where !StoreLayout.isTemporaryFileName(name) {
                if case .record(let record) = inspectEntry(name, in: area) {
                    largest = max(largest, record.enqueueSequence)
                }
            }
        }
        return largest
    }
}
