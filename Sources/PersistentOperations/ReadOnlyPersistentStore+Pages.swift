import Foundation

/// Pages of the pending records, for a store too large to list at once.
extension ReadOnlyPersistentStore {
    /// A page of the pending records in run order: at most `limit` of them, those that run
    /// after `cursor` (the last record of the previous page; `nil` for the first page).
    ///
    /// Pages are found by position in run order, not by count, so a page is right however the
    /// store changed since the last one: records that ran meanwhile are simply gone, and records
    /// added meanwhile come after those already listed (at their priority). The records are
    /// read one at a time and only `limit` of them are kept: a page of a store of a million
    /// records takes the memory of the page, of the journal's index, and of the operation
    /// graph's edges (for each record's ``StoredOperationRecord/dependents``). The pending
    /// entries that cannot be read come with the first page only.
    ///
    /// ```swift
    /// let view = try ReadOnlyPersistentStore(directory: URL(fileURLWithPath: "/var/app/store"))
    /// var page = try view.pendingRecords(after: nil, limit: 100)
    /// while !page.records.isEmpty {
    ///     for record in page.records { print(record.id, record.typeIdentifier) }
    ///     page = try view.pendingRecords(after: page.records.last, limit: 100)
    /// }
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when the area cannot be listed, and
    ///   ``PersistenceError/Code/invalidOptions`` when `limit` is less than 1.
    public func pendingRecords(after cursor: StoredOperationRecord?, limit: Int) throws -> RecordList {
        guard limit > 0 else {
            throw PersistenceError(.invalidOptions, "A page holds at least one record: the limit is \(limit).")
        }
        return try store.withReadSnapshot {
            let start = cursor.map { RunOrder(priority: $0.priority, enqueueSequence: $0.enqueueSequence) }
            var kept: [OperationRecord] = []
            // The pending records that depend on each pending record, for the page's `dependents`.
            var dependents: [String: [(order: RunOrder, id: PersistentOperationID)]] = [:]
            let isPending = try store.indexedPendingLookup()
            var pendingIDs: Set<String> = []   // a store not migrated to the journal yet
            func trim() {
                kept.sort(by: OperationRecord.runsBefore)
                kept.removeLast(max(0, kept.count - limit))
            }
            let report = try store.loadPending { record in
                if isPending == nil { pendingIDs.insert(record.id) }
                for prerequisite in record.prerequisites {
                    dependents[prerequisite, default: []].append((record.runOrder, PersistentOperationID(record: record.id)))
                }
                if let start, !(start < record.runOrder) { return }
                var record = record
                record.payload = Data()   // read again below for the records kept
                kept.append(record)
                if kept.count >= 2 * limit { trim() }
            }
            trim()
            let stored = pendingRecordView()
            let pending = isPending ?? { pendingIDs.contains($0) }
            let records = try kept.compactMap { summary -> StoredOperationRecord? in
                let full: OperationRecord
                do {
                    full = try store.readPending(id: summary.id)
                } catch let error as PersistenceError where error.code == .recordNotFound {
                    return nil   // a file of a store not migrated yet, removed meanwhile
                }
                var record = stored(full)
                // In run order, as ``pendingRecords()`` lists them.
                record.dependents = (dependents[summary.id] ?? []).sorted { $0.order < $1.order }.map(\.id)
                if record.state != .running, record.prerequisites.contains(where: { pending($0.rawValue) }) {
                    record.state = .waitingForPrerequisites
                }
                return record
            }
            return RecordList(records: records, unreadable: cursor == nil ? report.skipped.map(UnreadableEntry.init) : [])
        }
    }

    /// The pending record `id` as a page cursor (``pendingRecords(after:limit:)``): read by
    /// itself, through the journal's index when there is one, without the other records (so
    /// its state and dependents do not account for prerequisites). `nil` when it is not pending.
    package func pendingRecordForCursor(withID id: PersistentOperationID) throws -> StoredOperationRecord? {
        try store.withReadSnapshot {
            do {
                return pendingRecordView()(try store.readPending(id: id.rawValue))
            } catch let error as PersistenceError where error.code == .recordNotFound {
                return nil
            }
        }
    }
}
