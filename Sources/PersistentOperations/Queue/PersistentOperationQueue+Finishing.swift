import Foundation

// Finishing: a finished operation's record is removed (success, cancellation) or moved to the
// failed area before the queue forgets it; cancelling a stored operation that never started
// finishes it at once.

extension PersistentOperationQueue {
    /// Removes or moves the record of a finished operation, then forgets it; a failure or a
    /// cancellation takes the operation's dependents with it (see `+Graph`).
    func operationFinished(_ id: String, outcome: RetryingOperation.Outcome) {
        guard let (record, isSettled, expiry) = state.withLock({ state in state.entries[id].map { ($0.record, $0.isRecordSettled, $0.expiry) } }) else { return }
        var outcome = outcome
        if let expiry, !outcome.isSuccess {
            // Finished because it expired before it started (a plain operation is cancelled
            // and started to finish): it fails as expired.
            outcome = .failed(expiry)
        }
        if isSettled {
            // Abandoned with a prerequisite: its record was dealt with then.
            forget(id)
            return
        }
        if record.isPeriodic, expiry == nil, endPeriod(id, outcome: outcome) {
            return
        }
        let operationID = PersistentOperationID(record: id)
        switch outcome {
        case .succeeded:
            state.withLock { _ = beginEnding(id, as: .succeeded, in: &$0) }
            do {
                try store.removePending(id: id)
                hub.emit(.succeeded(operationID))
            } catch {
                reportStoreError(id, "could not save that the operation finished (\(outcome)); it runs again after a restore: \(error)")
            }
            store.clearAttemptsInFlight(forRecord: id)
            forget(id, ending: .succeeded)
        case .cancelled:
            graphLock.lock()
            let dependents = state.withLock { beginEnding(id, as: .cancelled, in: &$0) }
            // The dependents' records go first: none may outlive this one on disk.
            abandon(dependents, because: id, ending: .cancelled)
            do {
                try store.removePending(id: id)
                hub.emit(.cancelled(operationID))
            } catch {
                reportStoreError(id, "could not save that the operation finished (\(outcome)); it runs again after a restore: \(error)")
            }
            graphLock.unlock()
            store.clearAttemptsInFlight(forRecord: id)
            forget(id, ending: .cancelled)
        case .failed(let error):
            graphLock.lock()
            // Held until `forget` below, so that no retry re-tracks the record meanwhile.
            failedAreaLock.lock()
            defer { failedAreaLock.unlock() }
            let dependents = state.withLock { beginEnding(id, as: .failed, in: &$0) }
            let reason = String(describing: error)
            do {
                var failed = record
                failed.lastErrorDescription = reason
                try moveTrackedRecordToFailed(failed, reason: reason)
                hub.emit(.failed(operationID, reason: reason))
            } catch {
                reportStoreError(id, "could not save that the operation finished (\(outcome)); it runs again after a restore: \(error)")
            }
            abandon(dependents, because: id, ending: .failed, reason: reason)
            graphLock.unlock()
            store.clearAttemptsInFlight(forRecord: id)
            forget(id, ending: .failed)
        }
    }

    /// Stops tracking an operation and frees whatever slot it has. With `ending`, remembers
    /// how a live operation ended (for dependents added later), and after a success schedules
    /// the dependents that waited only for it.
    func forget(_ id: String, ending: Entry.Ending? = nil) {
        struct Forgotten {
            var slot: AttemptSlot?
            var waiters: [EmptyWaiter] = []
            var unblocked: [(id: String, due: Date?)] = []
            var emptyBatch: String?
            var released: [Operation] = []
            var hadSuspectFile = false
            var wasIsolatedNext = false
        }
        let forgotten = state.withLock { state -> Forgotten? in
            guard let entry = state.entries.removeValue(forKey: id) else { return nil }
            var forgotten = Forgotten()
            if let operation = entry.operation {
                state.idsByOperation.removeValue(forKey: ObjectIdentifier(operation))
                if let ending { remember(operation, id: id, ending: ending, in: &state) }
                forgotten.released.append(operation)
            }
            forgotten.released += entry.heldDependents
            forgotten.hadSuspectFile = entry.hasSuspectFile
            if state.isolation.contains(id) {
                forgotten.wasIsolatedNext = state.isolation.first == id
                endIsolation(of: id, in: &state)
            }
            switch entry.phase {
            case .queued(let queued): forgotten.slot = queued
            case .running(let running): forgotten.slot = running
            case .scheduled(let token): token?.cancel()
            case .ready, .waitingToRetry, .blocked, .waitingForConditions: break
            }
            entry.expiryTimer?.cancel()
            unpark(entry, in: &state)
            for dependent in state.dependents.removeValue(forKey: id) ?? [] {
                // Only a success leaves dependents here (a failure or cancellation took them).
                guard var waiting = state.entries[dependent], waiting.ending == nil, case .blocked = waiting.phase else { continue }
                waiting.remainingPrerequisites -= 1
                if waiting.remainingPrerequisites == 0 {
                    waiting.phase = .scheduled(nil)
                    forgotten.unblocked.append((dependent, waiting.record.dueDate))
                }
                state.entries[dependent] = waiting
            }
            if let batch = entry.record.batchID, let members = state.batchMembers[batch] {
                if members <= 1 {
                    state.batchMembers.removeValue(forKey: batch)
                    forgotten.emptyBatch = batch
                } else {
                    state.batchMembers[batch] = members - 1
                }
            }
            state.seriesBetweenPeriods.remove(id)
            if state.isIdle {
                forgotten.waiters = state.emptyWaiters
                state.emptyWaiters = []
            }
            return forgotten
        }
        guard let forgotten else { return }
        if forgotten.hadSuspectFile {
            store.clearSuspect(forRecord: id)
        }
        if let slot = forgotten.slot {
            if slot.isExecuting { slot.release() } else { slot.cancel() }
        }
        if let batch = forgotten.emptyBatch {
            store.removeBatchMarker(batch)
        }
        if forgotten.wasIsolatedNext {
            refillSlots()
        }
        for (dependent, due) in forgotten.unblocked {
            hub.emit(.unblocked(PersistentOperationID(record: dependent)))
            schedule(dependent, due: due)
        }
        finishedCondition.lock()
        finishedCondition.broadcast()
        finishedCondition.unlock()
        for waiter in forgotten.waiters {
            waiter.resume()
        }
        noteRunProgress()
        // Operations (and the dependents they held) are released here, outside every lock:
        // a deinit is user code.
        _ = forgotten.released
    }

    /// Under the state lock: remembers how a live operation ended, pruning the entries of
    /// operations that no longer exist once the table has doubled.
    private func remember(_ operation: Operation, id: String, ending: Entry.Ending, in state: inout State) {
        state.finishedOperations[ObjectIdentifier(operation)] = FinishedOperation(operation: operation, id: id, ending: ending)
        if state.finishedOperations.count >= state.finishedOperationsPruneThreshold {
            state.finishedOperations = state.finishedOperations.filter { $0.value.operation != nil }
            state.finishedOperationsPruneThreshold = max(64, 2 * state.finishedOperations.count)
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
            // An operation already ending (abandoned with a prerequisite) needs nothing more.
            guard var entry = state.entries[id], entry.ending == nil else { return nil }
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
            case .ready where !entry.hasStarted, .blocked where !entry.hasStarted, .waitingForConditions where !entry.hasStarted:
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

    /// Moves a tracked entry's record to the failed area. An entry restored and not built yet
    /// keeps no payload in memory (it expired, or its prerequisite failed, before it ran): the
    /// stored payload goes with it.
    func moveTrackedRecordToFailed(_ record: OperationRecord, reason: String) throws {
        var record = record
        if record.payload.isEmpty { record.payload = try store.readPending(id: record.id).payload }
        _ = try store.moveToFailed(record, reason: reason)
    }

    func reportStoreError(_ id: String?, _ message: String) {
        log(.error, "\(id.map { "\($0): " } ?? "")\(message)")
        hub.emit(.storeError(id.map { PersistentOperationID(record: $0) }, message: message))
    }
}
