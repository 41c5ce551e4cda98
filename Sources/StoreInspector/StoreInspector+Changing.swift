import Foundation
import PersistentOperations

/// The changing commands, which take the store's lock; `retry-failed`, `purge` and `cancel` ask
/// the running queue that holds it instead, through the store's inbox (`StoreInbox`).
extension StoreInspector {
    /// Moves failed records back to the pending area with a fresh retry budget; the app runs
    /// them when it next restores the store (a running app at once).
    func retryFailed(_ selection: InspectorCommand.Selection) throws {
        guard let writer = try openOrAsk(StoreInbox.Request(action: .retryFailed, selection), verb: "re-queued", note: "the running app runs them now") else {
            return
        }
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
        guard let writer = try openOrAsk(StoreInbox.Request(action: .purgeFailed, selection), verb: "purged", note: nil) else {
            return
        }
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

    /// Asks the running queue to cancel an operation, or those tagged so. A store no process
    /// holds has no queue to ask: cancelling is the queue's (its dependents fail with it).
    func cancel(_ target: InspectorCommand.CancelTarget) throws {
        let opened = try openForChange()
        guard case .held(let holder) = opened else {
            if case .opened(let store) = opened { store.close() }
            throw InspectorError.failure(
                "no running app holds the store, and cancel asks the app's queue; cancel from the app (cancelOperation(withID:)), or purge once the operation has failed"
            )
        }
        let request: StoreInbox.Request
        switch target {
        case .one(let id): request = StoreInbox.Request(action: .cancel, ids: [id])
        case .tagged(let tag): request = StoreInbox.Request(action: .cancel, tag: tag)
        }
        try ask(request, holder: holder, verb: "cancelled", note: nil, noun: "pending")
    }

    /// The store opened read-write; or, when a running app holds it, `nil` once `request` has
    /// been asked of that app (see ``ask(_:holder:verb:note:noun:)``).
    private func openOrAsk(_ request: StoreInbox.Request, verb: String, note: String?) throws -> RecordStore? {
        switch try openForChange() {
        case .opened(let store): return store
        case .held(let holder):
            try ask(request, holder: holder, verb: verb, note: note)
            return nil
        }
    }

    /// Leaves `request` in the store's inbox for the running queue, waits up to ``wait``
    /// seconds for its answer and prints it; throws when the queue did not do everything asked,
    /// or did not answer in time (the request then stays, for the queue to take in later).
    private func ask(_ request: StoreInbox.Request, holder: String, verb: String, note: String?, noun: String = "failed") throws {
        let inbox = StoreInbox(directory: store)
        let name = try inbox.send(request)
        let deadline = Date().addingTimeInterval(wait)
        var response = inbox.response(to: name)
        while response == nil, Date() < deadline {
            usleep(20_000)
            response = inbox.response(to: name)
        }
        guard let response else {
            throw InspectorError.failure(
                "the app that holds the store did not answer within \(Self.seconds(wait)) (\(holder)): the request waits in its inbox (\(name)); the app's queue does it once it has restored (Configuration.takesAdministrationRequests), or at its next launch"
            )
        }
        inbox.removeResponse(to: name)
        report(verb: verb, ids: response.affected, note: note, noun: noun, byRunningApp: true)
        if !response.succeeded {
            throw InspectorError.failure("the running app did not do everything asked: \(response.message)")
        }
    }

    private static func seconds(_ value: TimeInterval) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    private func report(verb: String, ids: [String], note: String?, noun: String = "failed", byRunningApp: Bool = false) {
        if json {
            print(JSONValue.object([(verb, .array(ids.map { .string($0) })), ("byRunningApp", .bool(byRunningApp))]).rendered(pretty: true))
            return
        }
        let by = byRunningApp ? "the running app " : ""
        print("\(by)\(verb) \(ids.count) \(noun) \(ids.count == 1 ? "record" : "records")\(ids.isEmpty || note == nil ? "" : "; \(note!)")")
        for id in ids { print("  \(id)") }
    }
}

extension StoreInbox.Request {
    /// A request for the failed records `selection` names.
    init(action: Action, _ selection: InspectorCommand.Selection) {
        switch selection {
        case .one(let id): self.init(action: action, ids: [id])
        case .all: self.init(action: action, all: true)
        }
    }
}
