import Foundation

// Finishing: a finished operation's record is removed (success, cancellation) or moved to the
// failed area before the queue forgets it; cancelling a stored operation that never started
// finishes it at once.

extension PersistentOperationQueue {
    /// Removes or moves the record of a finished operation, then forgets it.
    func operationFinished(_ id: String, outcome: RetryingOperation.Outcome) {
        guard let record = state.withLock({ $0.entries[id]?.record }) else { return }
        let operationID = PersistentOperationID(record: id)
        var isFailedAreaLocked = false
        defer { if isFailedAreaLocked { failedAreaLock.unlock() } }
        do {
            switch outcome {
            case .succeeded:
                try store.removePending(id: id)
                hub.emit(.succeeded(operationID))
            case .cancelled:
                try store.removePending(id: id)
                hub.emit(.cancelled(operationID))
            case .failed(let error):
                // Held until `forget` below, so that no retry re-tracks the record meanwhile.
                failedAreaLock.lock()
                isFailedAreaLocked = true
                var failed = record
                failed.lastErrorDescription = String(describing: error)
                let reason = String(describing: error)
                _ = try store.moveToFailed(failed, reason: reason)
                hub.emit(.failed(operationID, reason: reason))
            }
        } catch {
            reportStoreError(id, "could not save that the operation finished (\(outcome)); it runs again after a restore: \(error)")
        }
        store.clearAttemptsInFlight(forRecord: id)
        forget(id)
    }

    /// Stops tracking an operation and frees whatever slot it has.
    func forget(_ id: String) {
        let (slot, waiters) = state.withLock { state -> (AttemptSlot?, [EmptyWaiter]) in
            guard let entry = state.entries.removeValue(forKey: id) else { return (nil, []) }
            if let operation = entry.operation {
                state.idsByOperation.removeValue(forKey: ObjectIdentifier(operation))
            }
            var slot: AttemptSlot?
            switch entry.phase {
            case .queued(let queued): slot = queued
            case .running(let running): slot = running
            case .scheduled(let token): token?.cancel()
            case .ready, .waitingToRetry: break
            }
            guard state.entries.isEmpty else { return (slot, []) }
            defer { state.emptyWaiters = [] }
            return (slot, state.emptyWaiters)
        }
        if let slot {
            if slot.isExecuting { slot.release() } else { slot.cancel() }
        }
        finishedCondition.lock()
        finishedCondition.broadcast()
        finishedCondition.unlock()
        for waiter in waiters {
            waiter.resume()
        }
    }

    /// Cancels a tracked operation. One that never started is started outside the queue,
    /// so that it finishes (cancelled) at once instead of waiting for a slot or a date; a
    /// restored one that was never built finishes without being built.
    func cancel(_ id: String) {
        enum Target {
            case finishUnbuilt
            case operation(Operation, token: (any ScheduledRetry)?, slot: AttemptSlot?, startsNow: Bool)
        }
        let target = state.withLock { state -> Target? in
            guard var entry = state.entries[id] else { return nil }
            defer { state.entries[id] = entry }
            entry.isCancelRequested = true
            guard let operation = entry.operation else {
                // Being built for its first attempt, that attempt cancels it; otherwise it
                // never existed in this run, and finishing means removing its record.
                guard !entry.hasStarted else { return nil }
                entry.hasStarted = true
                return .finishUnbuilt
            }
            switch entry.phase {
            case .scheduled(let token) where !entry.hasStarted:
                entry.hasStarted = true
                entry.phase = .running(nil)
                return .operation(operation, token: token, slot: nil, startsNow: true)
            case .ready where !entry.hasStarted:
                entry.hasStarted = true
                entry.phase = .running(nil)
                return .operation(operation, token: nil, slot: nil, startsNow: true)
            case .queued(let slot) where !entry.hasStarted:
                entry.hasStarted = true
                entry.phase = .running(nil)
                return .operation(operation, token: nil, slot: slot, startsNow: true)
            default:
                return .operation(operation, token: nil, slot: nil, startsNow: false)
            }
        }
        switch target {
        case nil:
            return
        case .finishUnbuilt:
            operationFinished(id, outcome: .cancelled)
        case .operation(let operation, let token, let slot, let startsNow):
            token?.cancel()
            slot?.cancel()
            operation.cancel()
            if startsNow {
                DispatchQueue.global().async { operation.start() }
            }
        }
    }

    func reportStoreError(_ id: String?, _ message: String) {
        log(.error, "\(id.map { "\($0): " } ?? "")\(message)")
        hub.emit(.storeError(id.map { PersistentOperationID(record: $0) }, message: message))
    }
}
