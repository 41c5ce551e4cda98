import Foundation

extension RecordStore {
    /// Moves a failed record back to the pending area with a fresh retry budget, and returns it
    /// as stored there.
    ///
    /// The record keeps its identifier, payload, priority, enqueue sequence, tags and attempt
    /// count and prerequisites; its failure reason, failed prerequisite, retry count,
    /// next-attempt date and in-flight count are reset, and its expiration date is dropped (a
    /// re-queue is a request to run it, and an expired record would fail again at once).
    /// It is rewritten in the failed area first and then renamed, so a crash in between leaves
    /// a failed record without a reason, which the next ``loadFailed()`` moves on.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` and the errors of ``add(_:)``.
    package func requeueFailed(id: String) throws -> OperationRecord {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.requeueFailed(id: id) }
        let path = try existingRecordPath(id, in: .failed)
        guard case .record(var record) = inspectEntry(StoreLayout.fileName(ofRecord: id), in: .failed) else {
            throw PersistenceError(
                .corruptRecord, "The failed record cannot be read; list the failed area to quarantine it.",
                fileURL: url(path)
            )
        }
        record.failureReason = nil
        record.failedPrerequisite = nil
        record.numberOfRetries = 0
        record.nextAttemptAt = nil
        record.attemptsInFlight = 0
        record.expiresAt = nil
        record.isHoldingLane = false
        let bytes = try RecordFormat.encode(record, maximumSize: configuration.maximumRecordSize)
        try writeDurably(bytes, to: path, area: .failed)
        try move(id, from: .failed, to: .pending)
        return record
    }

    /// Re-queues every readable failed record (see ``requeueFailed(id:)``) and returns them in
    /// run order. Unreadable entries are quarantined.
    package func requeueAllFailed() throws -> [OperationRecord] {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.requeueAllFailed() }
        let report = try loadFailed()
        var requeued = report.completedMoves
        for record in report.records {
            requeued.append(try requeueFailed(id: record.id))
        }
        return requeued.sorted(by: OperationRecord.runsBefore)
    }

    /// The identifiers of the records in the failed area, in no particular order.
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` when the area cannot be listed.
    package func failedRecordIdentifiers() throws -> [String] {
        let readable = try readableJournal()
        var ids = readable?.journal.failedIdentifiers ?? []
        if readable?.filesToo ?? true {
            ids += try listArea(.failed).compactMap(StoreLayout.recordIdentifier(fromFileName:))
        }
        return Array(Set(ids))
    }

    /// Deletes a failed record for good.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound``, ``PersistenceError/Code/writeFailed``.
    package func purgeFailed(id: String) throws {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.purgeFailed(id: id) }
        try remove(id, from: .failed)
    }

    /// Deletes every record file of the failed area and returns how many were deleted.
    ///
    /// Entries that are not record files are quarantined rather than deleted.
    @discardableResult
    package func purgeAllFailed() throws -> Int {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.purgeAllFailed() }
        let report = try loadFailed()
        for record in report.records {
            try purgeFailed(id: record.id)
        }
        return report.records.count
    }
}
