import Foundation

// How a stored operation moves through the queue:
//
//   scheduled ──due──▶ (ready) ──▶ queued ──slot starts──▶ running ──wait──▶ waitingToRetry
//   (timer)            (no room    (AttemptSlot in the      │                    │ retry due
//                       for a       OperationQueue)         │                    ▼
//                       slot yet)                           │      (ready ▶) queued (admission) ──▶ running …
//                                                           ▼
//                                           finished: record removed / moved to failed
//
// At most `slotWindow()` slots sit in the OperationQueue at a time; due work beyond that waits
// in `State.ready`, a heap in run order, and gets a slot as one leaves. A restored operation is
// built from its record only when its first attempt starts (or when a query asks for it), so
// a restore of many records holds records, not operations.
//
// Every change of `Entry.phase` happens under `state`'s lock; slots are released, operations
// built, started or cancelled, records written and events emitted only after the lock is let go.

extension PersistentOperationQueue {
    struct Entry: Sendable {
        enum Phase: Sendable {
            /// Waiting in the timer for its not-before or next-attempt date (`nil` while
            /// being scheduled).
            case scheduled(DueTimer.Token?)
            /// Due, waiting in `State.ready` for room in the `OperationQueue`.
            case ready
            /// A slot is queued in the `OperationQueue`.
            case queued(AttemptSlot)
            /// An attempt runs, holding `slot` (`nil` for a cancelled operation started
            /// outside the queue so it can finish).
            case running(AttemptSlot?)
            /// A `RetryingOperation` between attempts.
            case waitingToRetry
        }

        var record: OperationRecord
        /// The live operation; `nil` for a restored one until its first attempt starts (or a
        /// query asks for it), when it is built from `record`.
        var operation: Operation?
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
            case .ready, .queued: return pendingAdmission == nil ? .queued : .waitingToRetry
            case .running: return .running
            case .waitingToRetry: return .waitingToRetry
            }
        }
    }

    // MARK: Tracking

    /// A due operation waiting for room in the `OperationQueue`.
    struct ReadySlot: Sendable {
        var id: String
        var order: RunOrder
    }

    /// Starts tracking a stored operation and schedules its first attempt.
    func track(_ operation: Operation, record: OperationRecord, attemptsInFlight: Int) {
        attach(operation, id: record.id)
        state.withLock { state in
            state.entries[record.id] = Entry(record: record, operation: operation, attemptsInFlight: attemptsInFlight)
            state.idsByOperation[ObjectIdentifier(operation)] = record.id
        }
        schedule(record.id, due: record.dueDate)
    }

    /// Starts tracking a restored (or re-queued) record whose operation is built later, when
    /// its first attempt starts; the caller schedules it. The payload is not kept: it is read from the
    /// record file again when the operation is built (an empty payload marks that; a stored
    /// payload never is empty).
    func trackRestored(_ record: OperationRecord, attemptsInFlight: Int) {
        var record = record
        record.payload = Data()
        let entry = Entry(record: record, operation: nil, attemptsInFlight: attemptsInFlight)
        state.withLock { $0.entries[record.id] = entry }
    }

    /// Connects an operation to the queue: its retries report here and wait in the queue's
    /// timer; a plain operation reports its end through its completion block.
    private func attach(_ operation: Operation, id: String) {
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
    }

    /// Puts a newly tracked operation in the timer until `due` (its not-before or
    /// next-attempt date), or queues it at once.
    func schedule(_ id: String, due: Date?) {
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

    /// The live operation of `id`, built from its record first if it has not been yet.
    ///
    /// Returns `nil` when the queue no longer tracks `id`, or when the operation cannot be
    /// built (its type was unregistered, or its payload no longer decodes): the record is
    /// then quarantined and the entry forgotten.
    func operation(for id: String) -> Operation? {
        let found = state.withLock { state -> (operation: Operation?, entry: Entry?, type: RegisteredType?) in
            guard let entry = state.entries[id] else { return (nil, nil, nil) }
            if let operation = entry.operation { return (operation, nil, nil) }
            return (nil, entry, state.registry[entry.record.typeIdentifier])
        }
        if let operation = found.operation { return operation }
        guard let entry = found.entry else { return nil }
        var record = entry.record
        let built: Operation
        do {
            if record.payload.isEmpty {
                let stored = try store.readPending(id: id)
                guard stored.typeIdentifier == record.typeIdentifier else {
                    throw PersistenceError(.corruptRecord, "the record's type changed on disk to \"\(stored.typeIdentifier)\"")
                }
                record.payload = stored.payload
            }
            guard let type = found.type else {
                throw PersistenceError(.unknownType, "\"\(record.typeIdentifier)\" is no longer registered")
            }
            built = try type.makeOperation(record.payload)
        } catch {
            // Cancelled and forgotten meanwhile (its record removed): nothing to quarantine.
            guard state.withLock({ $0.entries[id] != nil }) else { return nil }
            quarantineUnbuildable(record, error: error)
            return nil
        }
        built.queuePriority = Operation.QueuePriority(rawValue: record.priority) ?? .normal
        if let retrying = built as? RetryingOperation {
            // Only restored and re-queued entries are built here (added operations come
            // built), and before their first attempt, so the record and the count of attempts
            // in flight at the crash are still as the restore or the requeue left them.
            let attempts = record.numberOfAttempts + entry.attemptsInFlight
            retrying.restoreProgress(RetryingOperation.RestoredProgress(
                numberOfRetries: record.numberOfRetries,
                numberOfAttempts: attempts,
                resumesAsRetry: attempts > 0
            ))
        }
        attach(built, id: id)
        // Another thread may have built it meanwhile: the first one installed wins, and the
        // other, never started, is dropped.
        return state.withLock { state -> Operation? in
            guard var entry = state.entries[id] else { return nil }
            if let existing = entry.operation { return existing }
            entry.operation = built
            if entry.record.payload.isEmpty { entry.record.payload = record.payload }
            state.entries[id] = entry
            state.idsByOperation[ObjectIdentifier(built)] = id
            return built
        }
    }

    /// Quarantines the record of an operation that could not be built, and forgets it.
    private func quarantineUnbuildable(_ record: OperationRecord, error: any Error) {
        let reason = "the operation could not be rebuilt from its record: \(error)"
        do {
            let name = try store.quarantinePending(id: record.id, reason: reason)
            hub.emit(.quarantined(entryName: name, reason: reason))
        } catch {
            reportStoreError(record.id, "could not quarantine a record whose operation cannot be rebuilt; it was not run: \(error)")
        }
        store.clearAttemptsInFlight(forRecord: record.id)
        forget(record.id)
    }

    /// How many slots may sit in the `OperationQueue` at a time: enough to keep every one of
    /// its `maxConcurrentOperationCount` busy with room to spare, without parking thousands
    /// of placeholders there (Linux's `OperationQueue` slows down with many queued).
    func slotWindow() -> Int {
        let width = operationQueue.maxConcurrentOperationCount
        return width > 0 ? max(Self.minimumSlotWindow, 4 * width) : Self.unboundedQueueSlotWindow
    }

    static let minimumSlotWindow = 64
    static let unboundedQueueSlotWindow = 1_000

    /// Under the lock: gives a due entry a slot when the `OperationQueue` has room for one,
    /// or puts it in `ready` until it has.
    private func queueOrHold(_ entry: inout Entry, in state: inout State, window: Int) -> AttemptSlot? {
        guard state.slotsInQueue < window else {
            hold(&entry, in: &state)
            return nil
        }
        state.slotsInQueue += 1
        let slot = makeSlot(for: entry)
        entry.phase = .queued(slot)
        return slot
    }

    /// Under the lock: puts a due entry in `ready` until the `OperationQueue` has room.
    private func hold(_ entry: inout Entry, in state: inout State) {
        entry.phase = .ready
        state.ready.insert(ReadySlot(id: entry.record.id, order: entry.record.runOrder))
    }

    /// Queues a slot for the first attempt of a scheduled operation that became due.
    func enqueueSlot(for id: String) {
        let window = slotWindow()
        let slot = state.withLock { state -> AttemptSlot? in
            guard var entry = state.entries[id], case .scheduled = entry.phase else { return nil }
            defer { state.entries[id] = entry }
            return queueOrHold(&entry, in: &state, window: window)
        }
        if let slot { operationQueue.addOperation(slot) }
    }

    /// A slot left the `OperationQueue`: give its room to the next ready operations.
    ///
    /// A slot that leaves while its entry still waits for it was cancelled in the
    /// `OperationQueue` (`cancelAllOperations()`) before it started: the stored operation is
    /// not cancelled by that (cancel it through this queue), so it goes back to the ready
    /// operations and gets a new slot.
    private func slotDidLeave(_ leaving: AttemptSlot) {
        let window = slotWindow()
        let slots = state.withLock { state -> [AttemptSlot] in
            state.slotsInQueue -= 1
            if var entry = state.entries[leaving.recordID], case .queued(let queued) = entry.phase, queued === leaving {
                hold(&entry, in: &state)
                state.entries[leaving.recordID] = entry
            }
            var slots: [AttemptSlot] = []
            while state.slotsInQueue < window, let next = state.ready.popFirst() {
                // Skip what was cancelled or forgotten while it waited.
                guard var entry = state.entries[next.id], case .ready = entry.phase else { continue }
                if let slot = queueOrHold(&entry, in: &state, window: window) { slots.append(slot) }
                state.entries[next.id] = entry
            }
            return slots
        }
        for slot in slots {
            operationQueue.addOperation(slot)
        }
    }

    private func makeSlot(for entry: Entry) -> AttemptSlot {
        AttemptSlot(
            recordID: entry.record.id,
            priority: Operation.QueuePriority(rawValue: entry.record.priority) ?? .normal,
            onStart: { [weak self] slot in
                guard let self else { return slot.release() }
                self.slotDidStart(slot)
            },
            onFinish: { [weak self] slot in self?.slotDidLeave(slot) }
        )
    }

    private func slotDidStart(_ slot: AttemptSlot) {
        enum Action { case release, start(Operation?), admit(@Sendable () -> Void) }
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
        case .start(let existing):
            guard let operation = existing ?? operation(for: slot.recordID) else { return }
            if existing == nil, state.withLock({ $0.entries[slot.recordID]?.isCancelRequested == true }) {
                // Cancelled while it was being built: it starts only to finish, cancelled.
                operation.cancel()
            }
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
        let window = slotWindow()
        let outcome = state.withLock { state -> (isTracked: Bool, slot: AttemptSlot?) in
            guard var entry = state.entries[id], case .waitingToRetry = entry.phase else { return (false, nil) }
            defer { state.entries[id] = entry }
            entry.pendingAdmission = admit
            return (true, queueOrHold(&entry, in: &state, window: window))
        }
        guard outcome.isTracked else {
            // Not tracked (the queue was closed): let the operation go on unmanaged.
            admit()
            return
        }
        if let slot = outcome.slot { operationQueue.addOperation(slot) }
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
