import Foundation

// Batches: several records stored all or none, for `addOperations`.
//
// Every record of a batch carries the batch's identifier. They are written and synced
// together (one shared file-system sync), renamed into `pending/`, and the pending directory is
// synced once; only then is the batch's commit marker `batches/<batch id>.batch` written and
// made durable. A record that carries a batch identifier counts only while that marker exists:
// after a crash before the marker, ``RecordStore/loadPending()`` callers find the records
// without it and discard them (``discardUncommittedRecord(id:)``), so either every record of a
// batch is restored or none is. Once every record of a batch has left the pending area the
// marker is removed; a record moved to the failed area drops its batch identifier first.

extension RecordStore {
    /// Stores new pending records durably as one batch: when this returns every record is on
    /// disk and counts; after a crash at any moment before, none of them does.
    ///
    /// In the journal the batch is one frame, all or none by construction: its records need no
    /// ``OperationRecord/batchID`` (``needsBatchIdentifiers`` is false). In the earlier layout
    /// every record must carry the same batch identifier; each file is synced (one
    /// shared file-system sync for all of them where available), the pending directory once,
    /// then the commit marker is written and synced.
    ///
    /// - Throws: the errors of ``add(_:)``; after a failure nothing is stored (records already
    ///   renamed into place are taken back, and without a marker they would not count anyway).
    package func addBatch(_ records: [OperationRecord]) throws {
        let change = try beginChange()
        defer { change.end() }
        // One batch frame: all or none by construction, no marker or identifier needed.
        if let journal { return try journal.addBatch(records) }
        guard let batchID = records.first?.batchID else {
            preconditionFailure("addBatch(_:) needs records that carry a batch identifier")
        }
        precondition(records.allSatisfy { $0.batchID == batchID }, "every record of a batch carries the same batch identifier")
        var files: [(path: String, bytes: Data)] = []
        files.reserveCapacity(records.count)
        for record in records {
            let bytes = try RecordFormat.encode(record, maximumSize: configuration.maximumRecordSize)
            let path = layout.path(ofRecord: record.id, in: .pending)
            if (try? configuration.fileSystem.linkStatus(path)) != nil {
                throw PersistenceError(.writeFailed, "A pending record with this identifier already exists.", fileURL: url(path))
            }
            files.append((path, bytes))
        }
        do {
            try file.replaceContents(ofAll: files)
        } catch let error as DurableFile.BatchWriteError {
            takeBack(error.renamed)
            try checkAreaExists(.pending)
            throw writeFailed(
                "Could not write the batch's record files; nothing of the batch was stored.",
                path: files.first?.path ?? layout.path(of: .pending), error: error.underlyingError
            )
        }
        if let largest = records.map(\.enqueueSequence).max() { noteEnqueueSequence(largest) }
        let markerPath = layout.path(ofBatchMarker: batchID)
        do {
            try synchronize(.pending, changing: files[0].path)
            let marker = records.map(\.id).joined(separator: "\n") + "\n"
            try writeDurably(Data(marker.utf8), to: markerPath, area: .batches)
            try synchronize(.batches, changing: markerPath)
        } catch {
            // Not durable: take everything back, so a failed batch never runs after a crash.
            try? configuration.fileSystem.unlink(markerPath)
            takeBack(files.map(\.path))
            throw error
        }
    }

    /// Whether the records of an ``addBatch(_:)`` carry a batch identifier: only in the earlier
    /// layout, whose commit markers name it. A journal batch is one frame, and an identifier
    /// in each of its records would be dead weight (about fifty bytes a record).
    package var needsBatchIdentifiers: Bool { journal == nil }

    /// The batches whose commit marker exists, or `nil` when every stored batch is whole by
    /// construction (the journal writes a batch as one frame), so that none is to be discarded.
    ///
    /// - Throws: ``PersistenceError/Code/readFailed`` when the area cannot be listed. A store
    ///   created before batches existed has no such area: no batches.
    package func committedBatches() throws -> Set<String>? {
        if journal != nil { return nil }
        return try committedBatchMarkers()
    }

    /// The batches whose commit marker exists in `batches/`.
    func committedBatchMarkers() throws -> Set<String> {
        guard (try? configuration.fileSystem.linkStatus(layout.path(of: .batches)))?.kind == .directory else { return [] }
        return Set(try listArea(.batches).compactMap(StoreLayout.batchIdentifier(fromFileName:)))
    }

    /// Removes the commit marker of a batch none of whose records is pending any more.
    ///
    /// Not synced: a marker that a power cut brings back has no records, and the next restore
    /// removes it again.
    package func removeBatchMarker(_ batchID: String) {
        guard journal == nil, OperationRecord.isValidIdentifier(batchID), (try? checkWritable()) != nil else { return }
        try? configuration.fileSystem.unlink(layout.path(ofBatchMarker: batchID))
    }

    /// Removes a pending record of a batch whose commit marker does not exist: a crash
    /// interrupted its `addOperations`, which never returned, so the record was never
    /// acknowledged.
    package func discardUncommittedRecord(id: String) throws {
        let change = try beginChange()
        defer { change.end() }
        if let journal { return try journal.removePending(id: id, synchronizes: true) }
        try remove(id, from: .pending)
    }

    private func takeBack(_ paths: [String]) {
        for path in paths {
            try? configuration.fileSystem.unlink(path)
        }
    }
}
