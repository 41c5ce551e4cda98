import Foundation
import PersistentOperations

/// The changing commands, `retry-failed` and `purge`, which take the store's lock.
extension StoreInspector {
    /// Moves failed records back to the pending area with a fresh retry budget; the app runs
    /// them when it next restores the store.
    func retryFailed(_ selection: InspectorCommand.Selection) throws {
        let writer = try writableStore()
        defer { writer.close() }
        let requeued: [OperationRecord]
        switch selection {
        case .one(let id): requeued = [try writer.requeueFailed(id: id)]
        case .all: requeued = try writer.requeueAllFailed()
        }
        report(verb: "re-queued", ids: requeued.map(\.id), note: "the app runs them when it next restores the store")
    }

    /// Deletes failed records for good.
    func purge(_ selection: InspectorCommand.Selection) throws {
        let writer = try writableStore()
        defer { writer.close() }
        let ids: [String]
        switch selection {
        case .one(let id):
            try writer.purgeFailed(id: id)
            ids = [id]
        case .all:
            let records = try writer.loadFailed().records
            for record in records { try writer.purgeFailed(id: record.id) }
            ids = records.map(\.id)
        }
        report(verb: "purged", ids: ids, note: nil)
    }

    /// Moves quarantined records back to pending (every readable one with `.all`; entries that
    /// are not records stay, and are listed as skipped).
    func requeueQuarantined(_ selection: InspectorCommand.Selection) throws {
        let writer = try writableStore()
        defer { writer.close() }
        var requeued: [String] = []
        var skipped: [(name: String, reason: String)] = []
        switch selection {
        case .one(let name):
            requeued = [try writer.requeueQuarantined(named: name).id]
        case .all:
            for name in try writer.quarantinedEntryNames() {
                do {
                    requeued.append(try writer.requeueQuarantined(named: name).id)
                } catch let error as PersistenceError {
                    skipped.append((name, error.message))
                }
            }
        }
        if json {
            print(JSONValue.object([
                ("re-queued", .array(requeued.map { .string($0) })),
                ("skipped", .array(skipped.map { .object([("name", .string($0.name)), ("reason", .string($0.reason))]) })),
            ]).rendered(pretty: true))
            return
        }
        print("re-queued \(requeued.count) quarantined \(requeued.count == 1 ? "record" : "records")\(requeued.isEmpty ? "" : "; the app runs them when it next restores the store, and quarantines again a payload it still cannot read")")
        for id in requeued { print("  \(id)") }
        for entry in skipped { print("skipped \(entry.name): \(entry.reason)") }
    }

    private func report(verb: String, ids: [String], note: String?) {
        if json {
            print(JSONValue.object([(verb, .array(ids.map { .string($0) }))]).rendered(pretty: true))
            return
        }
        print("\(verb) \(ids.count) failed \(ids.count == 1 ? "record" : "records")\(ids.isEmpty || note == nil ? "" : "; \(note!)")")
        for id in ids { print("  \(id)") }
    }
}
