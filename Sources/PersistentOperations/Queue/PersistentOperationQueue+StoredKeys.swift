import Foundation

// Stored keys: unique keys before `restore()`.
//
// Until a restore has completed, the records an earlier launch left pending are on disk but not
// entries, so the entries alone cannot tell an add whether its unique key is taken. The first add
// with a unique key therefore reads the unique keys of the pending records that are not entries
// (once, into `State.storedUniqueKeys`: key → record identifiers, newest last). `.keepExisting`
// answers with the stored record, which runs after the restore; `.replaceExisting` stores the new
// record durably and then removes the stored one, its dependents' records first (each removal
// synced, deepest first), like a cancellation. Restore drops the table: from then on the entries
// cover every pending record. Adds without a unique key, and every add after a restore, never
// read it.
//
// Every step runs with `graphLock` held, then `uniqueKeyLock`: restore (which drops the table and
// tracks the stored records) and re-queueing failed records take `graphLock` too, so none of them
// sees the table or the removals halfway.

extension PersistentOperationQueue {
    /// Whether an add with a unique key must look at the stored records too: no restore has
    /// completed yet.
    func needsStoredUniqueKeys() -> Bool {
        !state.withLock { $0.hasRestored }
    }

    /// The pending records on disk that hold `key` and are not entries, newest last. Reads the
    /// store the first time only. Call with `graphLock` and `uniqueKeyLock` held, before a
    /// restore has completed.
    ///
    /// - Throws: ``PersistenceError`` when the pending directory cannot be listed.
    func storedRecords(withUniqueKey key: String) throws -> [String] {
        if let table = state.withLock({ $0.storedUniqueKeys }) {
            return table[key] ?? []
        }
        let tracked = state.withLock { Set($0.entries.keys) }
        var found: [String: [(sequence: UInt64, id: String)]] = [:]
        try store.readPendingRecords { record in
            guard let key = record.uniqueKey, !tracked.contains(record.id) else { return }
            found[key, default: []].append((record.enqueueSequence, record.id))
        }
        let table = found.mapValues { records in records.sorted { $0.sequence < $1.sequence }.map(\.id) }
        state.withLock { $0.storedUniqueKeys = table }
        return table[key] ?? []
    }

    /// Removes the stored records `ids`, which an add with a unique key replaced after storing
    /// its own record, each with the stored records that depend on it; emits `cancelled` for
    /// each (and `abandoned` for the dependents). Call as ``storedRecords(withUniqueKey:)``.
    ///
    /// A dependent's record is removed, synced, before its prerequisite's, so none outlives
    /// it on disk. When a removal fails the replaced record stays: the next restore removes
    /// it as replaced and cancels what depends on it.
    func removeReplacedStoredRecords(_ ids: [String]) {
        for id in ids.reversed() {
            let dependents: [(id: String, cause: String)]
            do {
                dependents = try storedDependents(of: id)
            } catch {
                reportStoreError(id, "could not read the records that depend on a replaced record; restore() removes it and cancels them: \(error)")
                continue
            }
            var removed: [String] = []
            defer { forgetStoredRecords(removed) }
            do {
                for dependent in dependents {
                    try store.removePending(id: dependent.id, synchronizes: true)
                    removed.append(dependent.id)
                    store.clearAttemptsInFlight(forRecord: dependent.id)
                    let operationID = PersistentOperationID(record: dependent.id)
                    hub.emit(.abandoned(operationID, prerequisite: PersistentOperationID(record: dependent.cause)))
                    hub.emit(.cancelled(operationID))
                }
                try store.removePending(id: id)
                removed.append(id)
                store.clearAttemptsInFlight(forRecord: id)
                hub.emit(.cancelled(PersistentOperationID(record: id)))
            } catch {
                reportStoreError(id, "could not remove a record replaced by a newer one with the same unique key; restore() removes it and cancels what depends on it: \(error)")
            }
        }
    }

    /// The pending records on disk that are not entries and depend on `id`, directly or not,
    /// each with the prerequisite that brought it in, in an order that lists every record
    /// after the records that depend on it (the order to remove them in).
    private func storedDependents(of id: String) throws -> [(id: String, cause: String)] {
        let tracked = state.withLock { Set($0.entries.keys) }
        var dependents: [String: [String]] = [:]
        try store.readPendingRecords { record in
            guard !record.prerequisites.isEmpty, !tracked.contains(record.id) else { return }
            for prerequisite in Set(record.prerequisites) {
                dependents[prerequisite, default: []].append(record.id)
            }
        }
        // Depth first, without recursion (a chain may be long); a record is listed once every
        // record that depends on it is.
        var order: [(id: String, cause: String)] = []
        var causes: [String: String] = [:]
        var visited: Set<String> = [id]
        var path: [(id: String, next: Int)] = [(id, 0)]
        while let top = path.last {
            let children = dependents[top.id] ?? []
            if top.next < children.count {
                path[path.count - 1].next += 1
                let child = children[top.next]
                if visited.insert(child).inserted {
                    causes[child] = top.id
                    path.append((child, 0))
                }
            } else {
                path.removeLast()
                if let cause = causes[top.id] { order.append((top.id, cause)) }
            }
        }
        return order
    }

    /// Drops removed records from the table of stored unique keys.
    private func forgetStoredRecords(_ ids: [String]) {
        guard !ids.isEmpty else { return }
        let removed = Set(ids)
        state.withLock { state in
            guard let table = state.storedUniqueKeys else { return }
            state.storedUniqueKeys = table.compactMapValues { records in
                let kept = records.filter { !removed.contains($0) }
                return kept.isEmpty ? nil : kept
            }
        }
    }
}
