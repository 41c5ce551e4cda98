import Foundation

// Migration from the earlier layout (formats 1–4: one file per record in `pending/` and
// `failed/`, batch commit markers in `batches/`) to the journal.
//
// A read-write open of a journal store that finds record files runs it, before any change can
// be made:
//
// 1. The files are read as the earlier layout read them: a move between `pending/` and
//    `failed/` that a crash interrupted is finished, unusable entries are quarantined, records
//    of a newer format version are left where they are, and the records of a batch whose
//    commit marker is missing (its `addOperations` never returned) are not taken.
// 2. The records the journal does not hold yet are appended to it — pending ones in batch
//    frames, failed ones in move frames — and flushed.
// 3. Their files and the batch markers are unlinked, and the directories flushed.
//
// A crash or a power cut at any instant leaves every record in its file, in the journal, or
// both; the next open runs the migration again, which takes only the records the journal does
// not hold and unlinks the rest. Nothing else changes the store before the migration ends,
// so a record's file and its journal copy are the same record.

extension RecordStore {
    /// Whether the earlier layout's areas hold anything but temporary files.
    func hasFilesOfEarlierLayout() -> Bool {
        [StoreLayout.Area.pending, .failed, .batches].contains { area in
            let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: area))) ?? []
            return names.contains { !StoreLayout.isTemporaryFileName($0) }
        }
    }

    /// Moves the records of the earlier layout into the journal; see the top of this file.
    ///
    /// - Throws: the errors of loading the areas and of ``JournalStore/importRecords(pending:failed:)``;
    ///   the store is then as it was, or partly migrated, and the next open goes on.
    func migrateFilesToJournal() throws {
        guard let journal else { return }
        let opened = journal.openReport.quarantined
        guard hasFilesOfEarlierLayout() else {
            state.withLock { $0.openFindings = opened }
            return
        }
        let change = try beginChange()
        defer { change.end() }
        var pending: [OperationRecord] = []
        let pendingReport = try loadArea(.pending, finishingMovesTo: .failed, where: { $0.failureReason != nil }) { pending.append($0) }
        var failed: [OperationRecord] = []
        let failedReport = try loadArea(.failed, finishingMovesTo: .pending, where: { $0.failureReason == nil }) { failed.append($0) }
        pending += failedReport.completedMoves
        let committed = try committedBatchMarkers()
        let isWhole = { (record: OperationRecord) in record.batchID.map(committed.contains) ?? true }
        let uncommitted = pending.filter { !isWhole($0) }.map(\.id)
        try journal.importRecords(pending: pending.filter(isWhole), failed: failed)

        let fileSystem = configuration.fileSystem
        for record in pending {
            try? fileSystem.unlink(layout.path(ofRecord: record.id, in: .pending))
        }
        for record in failed {
            try? fileSystem.unlink(layout.path(ofRecord: record.id, in: .failed))
        }
        for name in (try? fileSystem.contentsOfDirectory(layout.path(of: .batches))) ?? [] {
            try? fileSystem.unlink(layout.path(ofEntry: name, in: .batches))
        }
        // Always flushed, whatever the durability: files a power cut brought back would be
        // taken again, running operations that completed since.
        for area in [StoreLayout.Area.pending, .failed, .batches] {
            try? fileSystem.synchronizeDirectory(layout.path(of: area))
        }
        state.withLock { state in
            state.openFindings = opened + pendingReport.quarantined + failedReport.quarantined
            state.filesLeft = pendingReport.skipped + failedReport.skipped
            state.discardedByMigration = uncommitted
        }
    }

    /// The records of batches whose `addOperations` never returned that the migration to the
    /// journal dropped (see the top of this file); empty after the first call.
    package func takeRecordsDiscardedByMigration() -> [String] {
        state.withLock { state in
            defer { state.discardedByMigration = [] }
            return state.discardedByMigration
        }
    }
}
