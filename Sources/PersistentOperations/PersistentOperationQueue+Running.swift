import Foundation

// How a stored operation moves through the queue:
//
//   scheduled ──due──▶ queued ──slot starts──▶ running ──wait──▶ waitingToRetry
//   (timer)            (AttemptSlot in the       │                    │ retry due
//                       OperationQueue)          │                    ▼
//                                                │               queued (admission) ──▶ running …
//                                                ▼
//                                   finished: record removed / moved to failed
//
// Every change of `Entry.phase` happens under `state`'s lock; slots are released, operations
// started or cancelled, records written and events emitted only after the lock is let go.

extension PersistentOperationQueue {
    struct Entry: Sendable {
        enum Phase: Sendable {
            /// Waiting in the timer for its not-before or next-attempt date (`nil` while
            /// being scheduled).
            case scheduled((any ScheduledRetry)?)
            /// A slot is queued in the `OperationQueue`.
            case queued(AttemptSlot)
            /// An attempt runs, holding `slot` (`nil` for a cancelled operation started
            /// outside the queue so it can finish).
            case running(AttemptSlot?)
            /// A `RetryingOperation` between attempts.
            case waitingToRetry
        }

        var record: OperationRecord
        let operation: Operation
        var phase: Phase = .scheduled(nil)
        var hasStarted = false
        var attemptsInFlight: Int
        /// Cancelled (or replaced) and about to finish: it no longer holds its unique key.
        var isCancelRequested = false
        /// The call that starts a due retry attempt, once its slot starts.
        var pendingAdmission: (@Sendable () -> Void)?

        /// The state reported to users: a due retry queued for a slot still counts as
        /// waiting to retry.
        var infoState: PersistentOperationInfo.State {
            switch phase {
            case .scheduled: return .scheduled
            case .queued: return pendingAdmission == nil ? .queued : .waitingToRetry
            case .running: return .running
            case .waitingToRetry: return .waitingToRetry
            }
        }
    }

    // MARK: Tracking

    /// Starts tracking a stored operation and schedules its first attempt.
    func track(_ operation: Operation, record: OperationRecord, attemptsInFlight: Int) {
        let id = record.id
        if let retrying = operation as? RetryingOperation {
            retrying.driver = OperationTracker(recordID: id, queue: self)
            if retrying.retryScheduler is DispatchRetryScheduler {
                retrying.retryScheduler = timer
            }
        } else {
            let usersBlock = operation.completionBlock
            operation.completionBlock = { [weak self, weak operation] in
                usersBlock?()
                self?.operationFinished(id, outcome: operation?.isCancelled == true ? .cancelled : .succeeded)
            }
        }
        state.withLock { state in
            state.entries[id] = Entry(record: record, operation: operation, attemptsInFlight: attemptsInFlight)
            state.idsByOperation[ObjectIdentifier(operation)] = id
        }
        let due = [record.notBefore, record.nextAttemptAt].compactMap { $0 }.max()
        if let due, due > timer.now {
            let token = timer.schedule(at: due) { [weak self] in self?.enqueueSlot(for: id) }
            let isStale = state.withLock { state -> Bool in
                guard case .scheduled(nil)? = state.entries[id]?.phase else { return true }
                state.entries[id]?.phase = .scheduled(token)
                return false
            }
            if isStale { token.cancel() }
        } else {
            enqueueSlot(for: id)
        }
    }

    /// Queues a slot for the first attempt of a scheduled operation that became due.
    func enqueueSlot(for id: String) {
        let slot = state.withLock { state -> AttemptSlot? in
            guard let entry = state.entries[id], case .scheduled = entry.phase else { return nil }
            let slot = makeSlot(for: entry)
            state.entries[id]?.phase = .queued(slot)
            return slot
        }
        if let slot { operationQueue.addOperation(slot) }
    }

    private func makeSlot(for entry: Entry) -> AttemptSlot {
        AttemptSlot(recordID: entry.record.id, priority: entry.operation.queuePriority) { [weak self] slot in
            guard let self else { return slot.release() }
            self.slotDidStart(slot)
        }
    }

    private func slotDidStart(_ slot: AttemptSlot) {
        enum Action { case release, start(Operation), admit(@Sendable () -> Void) }
        let action = state.withLock { state -> Action in
            guard var entry = state.entries[slot.recordID], case .queued(let queued) = entry.phase, queued === slot else {
                return .release
            }
            defer { state.entries[slot.recordID] = entry }
            entry.phase = .running(slot)
            if !entry.hasStarted {
                entry.hasStarted = true
                return .start(entry.operation)
            }
            if let admit = entry.pendingAdmission {
                entry.pendingAdmission = nil
                return .admit(admit)
            }
            return .release
        }
        switch action {
        case .release:
            slot.release()
        case .start(let operation):
            if !(operation is RetryingOperation) {
                attemptWillStart(slot.recordID, attempt: nil)
            }
            operation.start()
        case .admit(let admit):
            admit()
        }
    }

    // MARK: Attempts and waits

    /// Counts the attempt in its marker (for crash-loop protection) and reports it.
    func attemptWillStart(_ id: String, attempt: Int?) {
        let counts = state.withLock { state -> (inFlight: Int, attempt: Int)? in
            guard var entry = state.entries[id] else { return nil }
            defer { state.entries[id] = entry }
            entry.attemptsInFlight += 1
            entry.record.numberOfAttempts = attempt ?? entry.record.numberOfAttempts + 1
            return (entry.attemptsInFlight, entry.record.numberOfAttempts)
        }
        guard let counts else { return }
        do {
            try store.setAttemptsInFlight(counts.inFlight, forRecord: id)
        } catch {
            reportStoreError(id, "could not record the start of an attempt: \(error)")
        }
        hub.emit(.started(PersistentOperationID(record: id), attempt: counts.attempt))
    }

    /// Saves the retry count and next-attempt date, then frees the attempt's slot.
    func operationWillWait(_ id: String, _ wait: RetryingOperation.WaitInfo) {
        let now = timer.now
        let change = state.withLock { state -> (record: OperationRecord, slot: AttemptSlot?)? in
            guard var entry = state.entries[id] else { return nil }
            defer { state.entries[id] = entry }
            entry.record.numberOfRetries = wait.numberOfRetriesOnRetry
            entry.record.numberOfAttempts = wait.numberOfAttempts
            entry.record.nextAttemptAt = wait.delay.map { now.addingTimeInterval($0) }
            entry.record.attemptsInFlight = 0
            if let description = wait.errorDescription {
                entry.record.lastErrorDescription = description
            }
            entry.attemptsInFlight = 0
            var slot: AttemptSlot?
            if case .running(let running) = entry.phase { slot = running }
            entry.phase = .waitingToRetry
            return (entry.record, slot)
        }
        guard let change else { return }
        do {
            try store.update(change.record)
        } catch {
            reportStoreError(id, "could not save the retry; after a crash the operation resumes from its previous record: \(error)")
        }
        store.clearAttemptsInFlight(forRecord: id)
        hub.emit(.retryScheduled(
            PersistentOperationID(record: id), isCounted: wait.isCounted,
            numberOfRetries: wait.numberOfRetriesOnRetry, nextAttemptAt: change.record.nextAttemptAt
        ))
        change.slot?.release()
    }

    /// A retry is due: queue a slot whose start admits it.
    func admissionRequested(_ id: String, admit: @escaping @Sendable () -> Void) {
        let slot = state.withLock { state -> AttemptSlot? in
            guard let entry = state.entries[id], case .waitingToRetry = entry.phase else { return nil }
            let slot = makeSlot(for: entry)
            state.entries[id]?.pendingAdmission = admit
            state.entries[id]?.phase = .queued(slot)
            return slot
        }
        guard let slot else {
            // Not tracked (the queue was closed): let the operation go on unmanaged.
            admit()
            return
        }
        operationQueue.addOperation(slot)
    }

    // MARK: Finishing

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
        let (slot, waiters) = state.withLock { state -> (AttemptSlot?, [CheckedContinuation<Void, Never>]) in
            guard let entry = state.entries.removeValue(forKey: id) else { return (nil, []) }
            state.idsByOperation.removeValue(forKey: ObjectIdentifier(entry.operation))
            var slot: AttemptSlot?
            switch entry.phase {
            case .queued(let queued): slot = queued
            case .running(let running): slot = running
            case .scheduled(let token): token?.cancel()
            case .waitingToRetry: break
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
    /// so that it finishes (cancelled) at once instead of waiting for a slot or a date.
    func cancel(_ id: String) {
        let target = state.withLock { state -> (operation: Operation, token: (any ScheduledRetry)?, slot: AttemptSlot?, startsNow: Bool)? in
            guard var entry = state.entries[id] else { return nil }
            defer { state.entries[id] = entry }
            entry.isCancelRequested = true
            switch entry.phase {
            case .scheduled(let token) where !entry.hasStarted:
                entry.hasStarted = true
                entry.phase = .running(nil)
                return (entry.operation, token, nil, true)
            case .queued(let slot) where !entry.hasStarted:
                entry.hasStarted = true
                entry.phase = .running(nil)
                return (entry.operation, nil, slot, true)
            default:
                return (entry.operation, nil, nil, false)
            }
        }
        guard let target else { return }
        target.token?.cancel()
        target.slot?.cancel()
        target.operation.cancel()
        if target.startsNow {
            let operation = target.operation
            DispatchQueue.global().async { operation.start() }
        }
    }

    func reportStoreError(_ id: String?, _ message: String) {
        log(.error, "\(id.map { "\($0): " } ?? "")\(message)")
        hub.emit(.storeError(id.map { PersistentOperationID(record: $0) }, message: message))
    }
}

/// Connects one stored `RetryingOperation` to its queue.
final class OperationTracker: RetryingOperationDriver {
    let recordID: String
    private weak let queue: PersistentOperationQueue?

    init(recordID: String, queue: PersistentOperationQueue) {
        self.recordID = recordID
        self.queue = queue
    }

    func operationWillStartAttempt(_ operation: RetryingOperation, _ attempt: RetryingOperation.AttemptInfo) {
        queue?.attemptWillStart(recordID, attempt: attempt.attempt)
    }

    func operationWillWait(_ operation: RetryingOperation, _ wait: RetryingOperation.WaitInfo) {
        queue?.operationWillWait(recordID, wait)
    }

    func operationRequestsAttempt(_ operation: RetryingOperation, admit: @escaping @Sendable () -> Void) {
        guard let queue else { return admit() }
        queue.admissionRequested(recordID, admit: admit)
    }

    func operationDidFinish(_ operation: RetryingOperation, _ outcome: RetryingOperation.Outcome) {
        queue?.operationFinished(recordID, outcome: outcome)
    }
}
