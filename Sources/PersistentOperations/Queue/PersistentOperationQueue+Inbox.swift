import Foundation

// The store's inbox (`StoreInbox`): operations other processes add (letters, see
// `StoreInbox+Letters.swift`) and requests from other processes. A queue whose configuration
// takes them takes the letters waiting in as its restore begins; after its first restore it
// watches the inbox, takes in each letter and does what each request asks through its own
// public API, one at a time, on `inboxQueue` (the inbox's one owner). The watch ends when the
// queue closes.

extension PersistentOperationQueue {
    /// What the queue's inbox owner keeps.
    struct InboxState: Sendable {
        var isStarted = false
        var isStopped = false
        var watcher: DirectoryWatcher?
    }

    /// Starts taking letters and requests from the store's inbox: those waiting now, then each
    /// as it arrives. Does nothing after the first call, after ``close()``, or when the
    /// configuration takes neither.
    func startTakingRequests() {
        guard configuration.takesAdministrationRequests || configuration.takesOperationsFromOtherProcesses else { return }
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

    /// Takes in the letters waiting, then does what each waiting request asks, oldest first,
    /// and answers it. Runs on `inboxQueue`.
    private func takeRequests() {
        guard !inbox.withLock({ $0.isStopped }) else { return }
        let storeInbox = StoreInbox(directory: directory, fileSystem: configuration.fileSystem)
        if configuration.takesOperationsFromOtherProcesses { takeLetters(from: storeInbox) }
        guard configuration.takesAdministrationRequests else { return }
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

// MARK: - Letters

extension PersistentOperationQueue {
    /// Takes in the letters waiting, on `inboxQueue`, when the configuration takes them.
    func takeLettersBeforeRestore() {
        guard configuration.takesOperationsFromOtherProcesses else { return }
        let storeInbox = StoreInbox(directory: directory, fileSystem: configuration.fileSystem)
        inboxQueue.sync {
            takeLetters(from: storeInbox)
            // What producers killed while writing left, once no write can be under way.
            storeInbox.removeTemporaryFiles(olderThan: 3_600)
        }
    }

    /// What becomes of a letter.
    private enum LetterOutcome {
        /// Its operations are stored (now, or by an earlier take-in) and it is removed.
        case takenIn(count: Int)
        /// It waits in the inbox, with its producer's later letters: `reason` says why.
        case waits(reason: String)
        /// It is set aside as rejected: `reason` says why.
        case rejected(reason: String)
        /// The queue cannot store now (closed, disk failing): the pass stops.
        case stops(reason: String)
    }

    /// Takes in the letters waiting, oldest first (see `StoreInbox+Letters.swift`). Runs on
    /// `inboxQueue`.
    private func takeLetters(from storeInbox: StoreInbox) {
        var waitingProducers: Set<String> = []
        for name in storeInbox.letterNames() {
            guard !inbox.withLock({ $0.isStopped }) else { return }
            let letter: StoreInbox.Letter
            do {
                letter = try storeInbox.letter(named: name)
            } catch let error as PersistenceError where error.code == .readFailed {
                log(.error, "cannot read letter \(name) in the store's inbox (it waits): \(error)")
                return
            } catch {
                settle(name, .rejected(reason: "\(error)"), producer: nil, in: storeInbox)
                continue
            }
            guard !waitingProducers.contains(letter.producer) else { continue }
            let outcome = takeIn(letter, named: name, from: storeInbox)
            settle(name, outcome, producer: letter.producer, in: storeInbox)
            switch outcome {
            case .takenIn, .rejected: continue
            case .waits: waitingProducers.insert(letter.producer)
            case .stops: return
            }
        }
    }

    /// Stores the operations of `letter` and removes it before they are scheduled.
    private func takeIn(_ letter: StoreInbox.Letter, named name: String, from storeInbox: StoreInbox) -> LetterOutcome {
        guard letter.formatVersion == StoreInbox.letterFormatVersion else {
            let reason = "its format version \(letter.formatVersion) is not the one this queue reads (\(StoreInbox.letterFormatVersion))"
            return letter.formatVersion > StoreInbox.letterFormatVersion ? .waits(reason: reason) : .rejected(reason: reason)
        }
        let registry = state.withLock { $0.registry }
        var operations: [any PersistentOperation] = []
        operations.reserveCapacity(letter.operations.count)
        for member in letter.operations {
            guard let type = registry[member.typeIdentifier] else {
                return .waits(reason: "type \"\(member.typeIdentifier)\" is not registered")
            }
            guard member.payloadVersion <= type.payloadVersion else {
                return .waits(reason: "type \"\(member.typeIdentifier)\" is stored with payload version \(member.payloadVersion), later than this app's \(type.payloadVersion)")
            }
            guard member.prerequisites.allSatisfy(letter.operations.indices.contains) else {
                return .rejected(reason: "an operation depends on one the letter does not hold")
            }
            do {
                guard let operation = try type.makeOperation(member.payload, member.payloadVersion) as? any PersistentOperation else {
                    return .rejected(reason: "type \"\(member.typeIdentifier)\" does not build a PersistentOperation")
                }
                operation.queuePriority = Operation.QueuePriority(rawValue: member.priority) ?? .normal
                operations.append(operation)
            } catch {
                return .rejected(reason: "the payload of type \"\(member.typeIdentifier)\" cannot be decoded: \(error)")
            }
        }
        for (operation, member) in zip(operations, letter.operations) {
            for prerequisite in member.prerequisites { operation.addDependency(operations[prerequisite]) }
        }
        var options = letter.options.enqueueOptions
        if options.idempotencyKey == nil { options.idempotencyKey = "inbox:" + name }
        var isRemoved = false
        do {
            _ = try addOperations(operations, options: options, hasMemberTags: false, tagsOfEach: { _ in [] }) {
                // Stored: the letter goes before any of them can start, so that a crash now
                // leaves records that never ran, whose key the next take-in finds.
                do {
                    try storeInbox.removeLetter(named: name)
                } catch {
                    log(.error, "letter \(name) is taken in but could not be removed; its key keeps it from being stored twice for \(configuration.idempotencyWindow) s: \(error)")
                }
                isRemoved = true
            }
        } catch let error as PersistenceError {
            switch error.code {
            case .unknownType, .unknownCondition:
                return .waits(reason: error.message)
            case .invalidDependency, .invalidOptions, .prerequisiteFailed, .payloadNotEncodable, .payloadDoesNotRoundTrip, .recordTooLarge:
                return .rejected(reason: error.message)
            default:
                return .stops(reason: error.message)
            }
        } catch {
            return .stops(reason: "\(error)")
        }
        if !isRemoved {
            // Its key was known: an earlier take-in stored it and was stopped before removing it.
            do {
                try storeInbox.removeLetter(named: name)
            } catch {
                return .stops(reason: error.localizedDescription)
            }
        }
        return .takenIn(count: operations.count)
    }

    /// Logs what became of letter `name`, and sets it aside when it is rejected.
    private func settle(_ name: String, _ outcome: LetterOutcome, producer: String?, in storeInbox: StoreInbox) {
        let from = producer.map { " from \($0)" } ?? ""
        switch outcome {
        case .takenIn(let count):
            log(.info, "took in \(count) operation\(count == 1 ? "" : "s") from letter \(name)\(from)") {
                ["letter": name, "producer": producer ?? "", "operations": "\(count)"]
            }
        case .waits(let reason):
            log(.warning, "letter \(name)\(from) waits in the store's inbox, with the later letters of its producer: \(reason)") {
                ["letter": name, "producer": producer ?? ""]
            }
        case .rejected(let reason):
            do {
                try storeInbox.rejectLetter(named: name)
                log(.error, "letter \(name)\(from) cannot be taken in and is kept as \(name)\(StoreInbox.rejectedExtension): \(reason)") {
                    ["letter": name, "producer": producer ?? ""]
                }
            } catch {
                log(.error, "letter \(name)\(from) cannot be taken in (\(reason)), nor set aside: \(error)")
            }
        case .stops(let reason):
            log(.error, "letter \(name)\(from) waits in the store's inbox: the queue cannot store it now: \(reason)") {
                ["letter": name, "producer": producer ?? ""]
            }
        }
    }
}
