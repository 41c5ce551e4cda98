import Foundation

// Requests from other processes (`StoreInbox`): after its first restore, a queue whose
// configuration takes them watches the store's inbox and does what each request asks through
// its own public API, one request at a time, on `inboxQueue` (the inbox's one owner). The
// watch ends when the queue closes.

extension PersistentOperationQueue {
    /// What the queue's inbox owner keeps.
    struct InboxState: Sendable {
        var isStarted = false
        var isStopped = false
        var watcher: DirectoryWatcher?
    }

    /// Starts taking requests from the store's inbox: those waiting now, then each as it
    /// arrives. Does nothing after the first call, after ``close()``, or when
    /// ``Configuration/takesAdministrationRequests`` is `false`.
    func startTakingRequests() {
        guard configuration.takesAdministrationRequests else { return }
        let starts = inbox.withLock { state -> Bool in
            guard !state.isStarted, !state.isStopped else { return false }
            state.isStarted = true
            return true
        }
        guard starts else { return }
        let storeInbox = StoreInbox(directory: directory, fileSystem: configuration.fileSystem)
        do {
            try storeInbox.create()
        } catch {
            log(.error, "cannot take requests from other processes: \(error)")
            return
        }
        let watcher = DirectoryWatcher(path: storeInbox.path, queue: inboxQueue) { [weak self] in self?.takeRequests() }
        let stopped = inbox.withLock { state -> Bool in
            if !state.isStopped { state.watcher = watcher }
            return state.isStopped
        }
        if stopped { watcher?.cancel() }
        inboxQueue.async { [weak self] in self?.takeRequests() }
    }

    /// Stops taking requests; a request under way finishes first.
    func stopTakingRequests() {
        let watcher = inbox.withLock { state -> DirectoryWatcher? in
            state.isStopped = true
            defer { state.watcher = nil }
            return state.watcher
        }
        watcher?.cancel()
        inboxQueue.sync {}
    }

    /// Does what each waiting request asks, oldest first, and answers it. Runs on `inboxQueue`.
    private func takeRequests() {
        guard !inbox.withLock({ $0.isStopped }) else { return }
        let storeInbox = StoreInbox(directory: directory, fileSystem: configuration.fileSystem)
        for (name, request) in storeInbox.pendingRequests() {
            let response: StoreInbox.Response
            switch request {
            case .success(let request) where request.formatVersion == StoreInbox.formatVersion:
                response = apply(request)
            case .success(let request):
                response = .init(succeeded: false, message: "The request's format version \(request.formatVersion) is not one this queue reads (\(StoreInbox.formatVersion)).", affected: [])
            case .failure(let error):
                response = .init(succeeded: false, message: error.message, affected: [])
            }
            do {
                try storeInbox.respond(to: name, with: response)
                log(.info, "request \(name) from another process: \(response.message)") {
                    ["request": name, "succeeded": "\(response.succeeded)", "affected": "\(response.affected.count)"]
                }
            } catch {
                log(.error, "could not answer request \(name) from another process (it is done again at the next launch): \(error)")
            }
        }
        storeInbox.removeResponses(olderThan: 86_400)
    }

    /// Does what `request` asks and says what was done.
    private func apply(_ request: StoreInbox.Request) -> StoreInbox.Response {
        var affected: [String] = []
        var problems: [String] = []
        func each(_ body: (PersistentOperationID) throws -> Bool) {
            for id in request.ids {
                do {
                    if try body(PersistentOperationID(record: id)) { affected.append(id) } else { problems.append("\(id): not found") }
                } catch let error as PersistenceError {
                    problems.append("\(id): \(error.message)")
                } catch {
                    problems.append("\(id): \(error)")
                }
            }
        }
        let verb: String
        do {
            switch request.action {
            case .retryFailed:
                verb = "re-queued"
                if request.all {
                    affected = try retryAllFailedOperations().map(\.rawValue)
                } else {
                    each { try retryFailedOperation(withID: $0); return true }
                }
            case .purgeFailed:
                verb = "purged"
                if request.all {
                    let failed = try failedOperations().map(\.id.rawValue)
                    for id in failed {
                        do {
                            try purgeFailedOperation(withID: PersistentOperationID(record: id))
                            affected.append(id)
                        } catch let error as PersistenceError where error.code == .recordNotFound {
                            continue   // re-queued or purged meanwhile
                        }
                    }
                } else {
                    each { try purgeFailedOperation(withID: $0); return true }
                }
            case .cancel:
                verb = "cancelled"
                if let tag = request.tag {
                    let tagged = operations(taggedWith: tag).map(\.id.rawValue)
                    _ = cancelOperations(taggedWith: tag)
                    affected = tagged
                } else {
                    each { cancelOperation(withID: $0) }
                }
            }
        } catch let error as PersistenceError {
            return .init(succeeded: false, message: error.message, affected: affected)
        } catch {
            return .init(succeeded: false, message: "\(error)", affected: affected)
        }
        let noun = affected.count == 1 ? "operation" : "operations"
        let message = "\(verb) \(affected.count) \(noun)" + (problems.isEmpty ? "" : "; not done: " + problems.joined(separator: "; "))
        return .init(succeeded: problems.isEmpty, message: message, affected: affected)
    }
}
