import Foundation

// Finishing: a finished operation's record is removed (success, cancellation) or moved to the
// failed area before the queue forgets it; cancelling a stored operation that never started
// finishes it at once.

extension PersistentOperationQueue {
    /// Removes or moves the record of a finished operation, then forgets it; a failure or a
    /// cancellation takes the operation's dependents with it (see `+Graph`).
    func operationFinished(_ id: String, outcome: RetryingOperation.Outcome) {
        guard let (record, isSettled, ending, expiry) = state.withLock({ state -> (OperationRecord, Bool, Entry.Ending?, RetryingOperationError?)? in
            guard let entry = state.entries[id] else { return nil }
            // The end of the running attempt, if it ran (for the events' attempt duration).
            var endedAt: UInt64 = 0
            if case .running = entry.phase { endedAt = DispatchTime.now().uptimeNanoseconds }
            state.entries[id]?.attemptEndedAt = endedAt
            return (entry.record, entry.isRecordSettled, entry.ending, entry.expiry)
        }) else { return }
        var outcome = outcome
        if let expiry, !outcome.isSuccess {
            // Finished because it expired before it started (a plain operation is cancelled
            // and started to finish): it fails as expired.
            outcome = .failed(expiry)
        }
        if isSettled {
            // Abandoned with a prerequisite: its record was dealt with then. How it ended is
            // remembered, so that a dependent added later is refused as one of an operation
            // that failed or was cancelled.
            forget(id, ending: ending)
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
            var detached: Detached
            var waiters: [EmptyWaiter] = []
            var unblocked: [(id: String, due: Date?)] = []
            var emptyBatch: String?
            var released: [Operation] = []
            var laneHeld: (lane: String, by: String)?
            var emptiedProgressGroup = false
        }
        let forgotten = state.withLock { state -> Forgotten? in
            guard let entry = state.entries.removeValue(forKey: id) else { return nil }
            let emptiedProgressGroup = left(entry.record, ended: true, in: &state)
            var forgotten = Forgotten(detached: detach(entry, in: &state))
            forgotten.emptiedProgressGroup = emptiedProgressGroup
            if let key = entry.operationKey, state.idsByOperation[key] == id {
                state.idsByOperation.removeValue(forKey: key)
            }
            if let operation = entry.liveOperation {
                if let ending { remember(operation, id: id, ending: ending, in: &state) }
                forgotten.released.append(operation)
            }
            forgotten.released += entry.heldDependents
            entry.expiryTimer?.cancel()
            for dependent in state.dependents.removeValue(forKey: id) ?? [] {
                // Only a success leaves dependents here (a failure or cancellation took them).
                guard var waiting = state.entries[dependent], waiting.ending == nil, case .blocked = waiting.phase else { continue }
                waiting.remainingPrerequisites -= 1
                if waiting.remainingPrerequisites == 0, !waiting.waitsForLane {
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
            if entry.record.lane != nil {
                let change = leaveLane(entry, ending: ending ?? entry.ending, in: &state)
                forgotten.unblocked += change.unblocked
                forgotten.laneHeld = change.held
            }
            forgotten.waiters = takeEmptyWaitersIfIdle(in: &state)
            return forgotten
        }
        guard let forgotten else { return }
        finishDetaching(id, forgotten.detached)
        if let batch = forgotten.emptyBatch {
            store.removeBatchMarker(batch)
        }
        if let held = forgotten.laneHeld {
            hub.emit(.laneHeld(lane: held.lane, by: PersistentOperationID(record: held.by)))
        }
        scheduleUnblocked(forgotten.unblocked)
        if forgotten.emptiedProgressGroup { updateProgressNow() }
        signalProgress(resuming: forgotten.waiters)
        // Operations (and the dependents they held) are released here, outside every lock:
        // a deinit is user code.
        _ = forgotten.released
    }

    /// What ``detach(_:in:)`` leaves to do outside the lock (``finishDetaching(_:_:)``).
    struct Detached {
        var slot: AttemptSlot?
        var hadSuspectFile = false
        var wasIsolatedNext = false
    }

    /// Under the lock: takes an entry that is forgotten, or between two periods, out of its
    /// phase's timer and condition wait and out of the isolation list; its slot and suspect
    /// file are let go outside the lock.
    func detach(_ entry: Entry, in state: inout State) -> Detached {
        let id = entry.record.id
        var detached = Detached(hadSuspectFile: entry.hasSuspectFile)
        if state.isolation.contains(id) {
            detached.wasIsolatedNext = state.isolation.first == id
            endIsolation(of: id, in: &state)
        }
        endIsolationAfterOthers(of: id, in: &state)
        switch entry.phase {
        case .queued(let queued): detached.slot = queued
        case .running(let running): detached.slot = running
        case .scheduled(let token): token?.cancel()
        case .ready, .waitingToRetry, .blocked, .waitingForConditions: break
        }
        unpark(entry, in: &state)
        return detached
    }

    /// Outside the lock: frees the slot and the suspect file of a detached entry, and, when it
    /// was the operation running alone, lets the next ones have slots.
    func finishDetaching(_ id: String, _ detached: Detached) {
        if detached.hadSuspectFile {
            store.clearSuspect(forRecord: id)
        }
        if let slot = detached.slot {
            if slot.isExecuting { slot.release() } else { slot.cancel() }
        }
        if detached.wasIsolatedNext {
            refillSlots()
        }
    }

    /// Under the lock: the tasks awaiting an idle queue, taken when it is idle now.
    func takeEmptyWaitersIfIdle(in state: inout State) -> [EmptyWaiter] {
        guard state.isIdle else { return [] }
        defer { state.emptyWaiters = [] }
        return state.emptyWaiters
    }

    /// Outside the lock: an entry left the queue or went idle — wakes the blocking waiters,
    /// resumes `waiters`, and lets the bounded runs check whether they have drained.
    func signalProgress(resuming waiters: [EmptyWaiter]) {
        finishedCondition.lock()
        finishedCondition.broadcast()
        finishedCondition.unlock()
        for waiter in waiters {
            waiter.resume()
        }
        noteRunProgress()
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
            guard let operation = entry.holdLiveOperation() else {
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

    /// Moves a tracked entry's record to the failed area, with its stored payload (see
    /// ``withStoredPayload(_:)``).
    func moveTrackedRecordToFailed(_ record: OperationRecord, reason: String) throws {
        var record = record
        // The current operation of a lane that holds on a failure: saved as holding it, so
        // that the lane still holds after a relaunch (see `+Lanes`).
        if record.laneHoldsOnFailure, let lane = record.lane, state.withLock({ $0.lanes[lane]?.current == record.id }) {
            record.isHoldingLane = true
        }
        _ = try store.moveToFailed(try withStoredPayload(record), reason: reason)
    }

    /// A tracked entry's record with its payload, read from the store: entries keep no payload
    /// in memory (an operation's payload is encoded in its record once stored, and read again
    /// only to build the operation or to rewrite the record, as here).
    func withStoredPayload(_ record: OperationRecord) throws -> OperationRecord {
        guard record.payload.isEmpty else { return record }
        var record = record
        record.payload = try store.readPending(id: record.id).payload
        return record
    }

    func reportStoreError(_ id: String?, _ message: String) {
        log(.error, "\(id.map { "\($0): " } ?? "")\(message)") { id.map { ["operation_id": $0] } ?? [:] }
        hub.emit(.storeError(id.map { PersistentOperationID(record: $0) }, message: message))
    }
}
