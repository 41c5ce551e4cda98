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
    /// records takes the memory of the page, of the journal's index, of the operation graph's
    /// edges (for each record's ``StoredOperationRecord/dependents``) and of one small entry
    /// per lane. Each record's ``StoredOperationRecord/state`` is the one ``pendingRecords()``
    /// gives it, waiting for a prerequisite or for its lane included. The pending entries that
    /// cannot be read come with the first page only.
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
        try pendingRecords(after: cursor, limit: limit, where: nil)
    }

    /// A page of the pending records that `isIncluded` accepts, like
    /// ``pendingRecords(after:limit:)``: at most `limit` of them, those that run after `cursor`
    /// (which `isIncluded` need not accept), in the same bounded memory. `nil` accepts every record.
    ///
    /// `isIncluded` sees each record as the page would list it — its state settled by its
    /// prerequisites and its lane — but without its ``StoredOperationRecord/dependents``. It is
    /// asked as the records are read, so that only the page is kept; for the first record of
    /// a lane so far it is asked twice, as the lane's first and as waiting behind it, because
    /// which it is shows only once every record is read. In a store not migrated to the
    /// journal yet, a filtered page reads the records twice: first to learn which are pending.
    ///
    /// ```swift
    /// let view = try ReadOnlyPersistentStore(directory: URL(fileURLWithPath: "/var/app/store"))
    /// let blocked = try view.pendingRecords(after: nil, limit: 100) { $0.state == .waitingForLane }
    /// print(blocked.records.map(\.id))
    /// ```
    package func pendingRecords(
        after cursor: StoredOperationRecord?, limit: Int, where isIncluded: ((StoredOperationRecord) -> Bool)?
    ) throws -> RecordList {
        guard limit > 0 else {
            throw PersistenceError(.invalidOptions, "A page holds at least one record: the limit is \(limit).")
        }
        return try store.withReadSnapshot {
            let start = cursor.map { RunOrder(priority: $0.priority, enqueueSequence: $0.enqueueSequence) }
            let stored = pendingRecordView()
            // The records of the page so far: their payloads are read again once it is known.
            var kept: [(order: RunOrder, id: String)] = []
            // The pending records that depend on each pending record, for the page's `dependents`.
            var dependents: [String: [(order: RunOrder, id: PersistentOperationID)]] = [:]
            // The first record of each lane so far, the only one of its lane not waiting for it.
            var lanes: [String: LaneFirst] = [:]
            let indexedPending = try store.indexedPendingLookup()
            var pendingIDs: Set<String> = []   // a store not migrated to the journal yet
            if indexedPending == nil, isIncluded != nil {
                // Which records are pending must be known before the first record is judged.
                _ = try store.loadPending { pendingIDs.insert($0.id) }
            }
            let isPending = indexedPending ?? { pendingIDs.contains($0) }
            func trim() {
                kept.sort { $0.order < $1.order }
                kept.removeLast(max(0, kept.count - limit))
            }
            func keep(_ order: RunOrder, _ id: String) {
                kept.append((order, id))
                if kept.count >= 2 * limit { trim() }
            }
            func isListed(_ record: OperationRecord, isBehindInLane: Bool) -> Bool {
                if let start, !(start < record.runOrder) { return false }
                guard let isIncluded else { return true }
                return isIncluded(Self.settled(stored(record), isBehindInLane: isBehindInLane, isPending: isPending))
            }
            let report = try store.loadPending { record in
                if indexedPending == nil { pendingIDs.insert(record.id) }
                for prerequisite in record.prerequisites {
                    dependents[prerequisite, default: []].append((record.runOrder, PersistentOperationID(record: record.id)))
                }
                guard let lane = record.lane else {
                    if isListed(record, isBehindInLane: false) { keep(record.runOrder, record.id) }
                    return
                }
                if let first = lanes[lane], first.order.enqueueSequence < record.enqueueSequence {
                    if isListed(record, isBehindInLane: true) { keep(record.runOrder, record.id) }
                    return
                }
                // The lane's first so far; the one it replaces waits behind it.
                if let previous = lanes[lane], previous.isListedBehind { keep(previous.order, previous.id) }
                lanes[lane] = LaneFirst(
                    order: record.runOrder, id: record.id,
                    isListedFirst: isListed(record, isBehindInLane: false), isListedBehind: isListed(record, isBehindInLane: true)
                )
            }
            for first in lanes.values where first.isListedFirst { kept.append((first.order, first.id)) }
            trim()
            let records = try kept.compactMap { entry -> StoredOperationRecord? in
                let full: OperationRecord
                do {
                    full = try store.readPending(id: entry.id)
                } catch let error as PersistenceError where error.code == .recordNotFound {
                    return nil   // a file of a store not migrated yet, removed meanwhile
                }
                let isBehindInLane = full.lane.map { lanes[$0]?.id != full.id } ?? false
                var record = Self.settled(stored(full), isBehindInLane: isBehindInLane, isPending: isPending)
                // A file of a store not migrated yet, changed meanwhile, may no longer be included.
                if let isIncluded, !isIncluded(record) { return nil }
                // In run order, as ``pendingRecords()`` lists them.
                record.dependents = (dependents[entry.id] ?? []).sorted { $0.order < $1.order }.map(\.id)
                return record
            }
            return RecordList(records: records, unreadable: cursor == nil ? report.skipped.map(UnreadableEntry.init) : [])
        }
    }

    /// The first record of a lane among those read so far, and whether a page lists it as the
    /// lane's first and as waiting behind another.
    private struct LaneFirst {
        var order: RunOrder
        var id: String
        var isListedFirst: Bool
        var isListedBehind: Bool
    }

    /// `record` with the state ``StoredOperationRecord/linkingGraph(of:)`` gives it in the
    /// whole list: unless it is running, waiting for a pending prerequisite, else waiting for
    /// its lane when a record added before it to the lane is pending.
    private static func settled(
        _ record: StoredOperationRecord, isBehindInLane: Bool, isPending: (String) -> Bool
    ) -> StoredOperationRecord {
        guard record.state != .running else { return record }
        var record = record
        if record.prerequisites.contains(where: { isPending($0.rawValue) }) {
            record.state = .waitingForPrerequisites
        } else if isBehindInLane {
            record.state = .waitingForLane
        }
        return record
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
