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

    private func report(verb: String, ids: [String], note: String?) {
        if json {
            print(JSONValue.object([(verb, .array(ids.map { .string($0) }))]).rendered(pretty: true))
            return
        }
        print("\(verb) \(ids.count) failed \(ids.count == 1 ? "record" : "records")\(ids.isEmpty || note == nil ? "" : "; \(note!)")")
        for id in ids { print("  \(id)") }
    }
}
