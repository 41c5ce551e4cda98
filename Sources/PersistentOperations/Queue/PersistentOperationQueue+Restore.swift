import Foundation

// Restore: the records an earlier run left pending are read one at a time, checked (type
// registered, payload decodes, crash-loop count), tracked as small entries and scheduled in run
// order; each operation is built only when its first attempt starts.

extension PersistentOperationQueue {
    /// Re-adds every operation an earlier run left pending, and reports what could not be.
    ///
    /// Each readable record is rebuilt through the type registered for its
    /// ``PersistentOperation/persistenceIdentifier`` (never from a class name) and scheduled
    /// in priority, then enqueue, order. A `RetryingOperation` continues its retry count,
    /// is told `isRetry: true` if it had made an attempt, and waits for its saved
    /// next-attempt date. An attempt that was running when the process died runs again.
    ///
    /// Nothing in the store can crash the process or stop the other records from running:
    /// - corrupt, truncated, oversized or non-file entries, and records whose payload does
    ///   not decode, are moved to the quarantine area (``RestoreReport/quarantined``);
    /// - records of unregistered types are left on disk untouched (``RestoreReport/unknownTypes``);
    /// - an operation whose attempt was running during ``Configuration/crashLoopLimit``
    ///   consecutive crashes is moved to the failed area (``RestoreReport/movedToFailedAfterCrashes``).
    ///
    /// Records already tracked (added in this run, or restored before) are skipped, so a
    /// second call restores nothing twice.
    ///
    /// ```swift
    /// queue.register(UploadOperation.self)
    /// let report = try queue.restore()
    /// print("resumed \(report.restored.count) operations, quarantined \(report.quarantined.count)")
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when the pending directory cannot be listed, or a bad
    ///   entry cannot be moved to the quarantine area.
    @discardableResult
    public func restore() throws -> RestoreReport {
        try checkOpen()
        let markers = store.attemptsInFlight()
        var report = RestoreReport()
        let (tracked, newestTrackedByKey) = state.withLock { state in
            var newest: [String: UInt64] = [:]
            for entry in state.entries.values {
                if let key = entry.record.uniqueKey { newest[key] = max(newest[key] ?? 0, entry.record.enqueueSequence) }
            }
            return (Set(state.entries.keys), newest)
        }

        // Records are taken one at a time as they are read, and only what scheduling needs
        // is kept of each (its payload is read again when the operation is built), so a
        // restore of many records never holds them all. Records with a unique key wait until
        // every record has been read, to know which of them is the newest.
        var restored: [RestoredRecord] = []
        var keyed: [OperationRecord] = []
        // One copy of each type identifier for all the records of that type.
        var typeIdentifiers: Set<String> = []
        let loaded = try store.loadPending(reservingCapacity: { count in
            // Growing the table by doubling would briefly hold the old one beside the new.
            state.withLock { $0.entries.reserveCapacity($0.entries.count + count) }
            restored.reserveCapacity(count)
        }) { record in
            guard !tracked.contains(record.id) else { return }
            var record = record
            if let index = typeIdentifiers.firstIndex(of: record.typeIdentifier) {
                record.typeIdentifier = typeIdentifiers[index]
            } else {
                typeIdentifiers.insert(record.typeIdentifier)
            }
            if record.uniqueKey != nil {
                keyed.append(record)
            } else {
                admitRestored(record, attemptsInFlight: markers[record.id] ?? 0, into: &restored, report: &report)
            }
        }
        for entry in loaded.quarantined {
            let name = entry.quarantineName ?? entry.name
            report.quarantined.append(RestoreReport.Entry(name: name, reason: entry.reason))
            hub.emit(.quarantined(entryName: name, reason: entry.reason))
        }
        for entry in loaded.skipped {
            report.newerFormatVersions.append(RestoreReport.Entry(name: entry.name, reason: entry.reason))
        }

        var newest = newestTrackedByKey
        for record in keyed {
            if let key = record.uniqueKey { newest[key] = max(newest[key] ?? 0, record.enqueueSequence) }
        }
        for record in keyed {
            if let key = record.uniqueKey, let newestSequence = newest[key], newestSequence != record.enqueueSequence {
                // A replacement that a crash interrupted: the newer record wins.
                do {
                    try store.removePending(id: record.id)
                    store.clearAttemptsInFlight(forRecord: record.id)
                    report.removedAsReplaced.append(PersistentOperationID(record: record.id))
                } catch {
                    reportStoreError(record.id, "could not remove a record replaced by a newer one with the same unique key: \(error)")
                }
                continue
            }
            admitRestored(record, attemptsInFlight: markers[record.id] ?? 0, into: &restored, report: &report)
        }
        keyed = []

        restored.sort { $0.order < $1.order }
        report.restored = restored.map { PersistentOperationID(record: $0.id) }
        // Reported before any of them is scheduled, so each `restored` event comes before
        // the operation's first `started`.
        hub.emit(contentsOf: restored.map { .restored(PersistentOperationID(record: $0.id), typeIdentifier: $0.typeIdentifier) })
        for record in restored {
            schedule(record.id, due: record.due)
        }
        log(.info, "restored \(report.restored.count) operations; \(report.quarantined.count) quarantined, \(report.unknownTypes.count) of unknown types, \(report.movedToFailedAfterCrashes.count) moved to failed after crashes")
        return report
    }

    /// What ``restore()`` keeps of a restored record until it is scheduled.
    struct RestoredRecord {
        var id: String
        var typeIdentifier: String
        var order: RunOrder
        var due: Date?
    }

    /// Tracks one restored record, unless it crash-looped (moved to the failed area) or
    /// cannot be rebuilt (reported); the payload is decoded to check it, but the operation is
    /// built only when its first attempt starts.
    private func admitRestored(_ record: OperationRecord, attemptsInFlight inFlight: Int, into restored: inout [RestoredRecord], report: inout RestoreReport) {
        let id = PersistentOperationID(record: record.id)
        if inFlight >= configuration.crashLoopLimit {
            let reason = "an attempt was running during \(inFlight) consecutive crashes (crash-loop limit \(configuration.crashLoopLimit))"
            do {
                var failed = record
                failed.attemptsInFlight = inFlight
                _ = try store.moveToFailed(failed, reason: reason)
                store.clearAttemptsInFlight(forRecord: record.id)
                report.movedToFailedAfterCrashes.append(id)
                hub.emit(.failed(id, reason: reason))
            } catch {
                reportStoreError(record.id, "could not move a crash-looping record to the failed area; it was not run: \(error)")
            }
            return
        }
        guard isRebuildable(record, report: &report) else { return }
        trackRestored(record, attemptsInFlight: inFlight)
        restored.append(RestoredRecord(
            id: record.id, typeIdentifier: record.typeIdentifier, order: record.runOrder, due: record.dueDate
        ))
    }

    /// Whether a readable pending record's type is registered and its payload decodes;
    /// records why not: an unknown type (left untouched) or a payload that does not decode
    /// (quarantined).
    func isRebuildable(_ record: OperationRecord, report: inout RestoreReport) -> Bool {
        guard let type = registeredType(of: record, report: &report) else { return false }
        do {
            try type.checkPayload(record.payload)
        } catch {
            quarantineUndecodable(record, error: error, report: &report)
            return false
        }
        return true
    }

    /// The registered type of a record; an unknown one is reported and remembered.
    private func registeredType(of record: OperationRecord, report: inout RestoreReport) -> RegisteredType? {
        let id = PersistentOperationID(record: record.id)
        guard let type = state.withLock({ $0.registry[record.typeIdentifier] }) else {
            let unknown = UnknownTypeRecord(id: id, typeIdentifier: record.typeIdentifier)
            state.withLock { $0.unknownTypeRecords[record.id] = unknown }
            report.unknownTypes.append(unknown)
            hub.emit(.unknownType(id, typeIdentifier: record.typeIdentifier))
            return nil
        }
        state.withLock { _ = $0.unknownTypeRecords.removeValue(forKey: record.id) }
        return type
    }

    private func quarantineUndecodable(_ record: OperationRecord, error: any Error, report: inout RestoreReport) {
        let reason = "the payload does not decode as \"\(record.typeIdentifier)\": \(error)"
        do {
            let name = try store.quarantinePending(id: record.id, reason: reason)
            store.clearAttemptsInFlight(forRecord: record.id)
            report.quarantined.append(RestoreReport.Entry(name: name, reason: reason))
            hub.emit(.quarantined(entryName: name, reason: reason))
        } catch {
            reportStoreError(record.id, "could not quarantine a record whose payload does not decode; it was not run: \(error)")
        }
    }
}
