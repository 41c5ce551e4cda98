import Foundation

// Slots: the placeholders that hold one place of the `OperationQueue` for the length of an
// attempt, the window that bounds how many sit there at a time, and the ready heap that holds due
// work beyond it, in run order.

extension PersistentOperationQueue {
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
    func queueOrHold(_ entry: inout Entry, in state: inout State, window: Int) -> AttemptSlot? {
        if parkUnlessConditionsHold(&entry, in: &state) { return nil }
        guard state.slotsInQueue < window, isolationAllows(entry.record.id, in: state) else {
            hold(&entry, in: &state)
            return nil
        }
        if parkUnlessUnderLimits(&entry, in: &state) { return nil }
        if parkUnlessStartsLeft(&entry, starting: nil, in: &state) { return nil }
        state.slotsInQueue += 1
        let slot = makeSlot(for: entry)
        countAgainstLimits(slot, in: &state)
        reserveStarts(for: slot, in: &state)
        entry.phase = .queued(slot)
        return slot
    }

    /// Under the lock: puts a due entry in `ready` until the `OperationQueue` has room.
    func hold(_ entry: inout Entry, in state: inout State) {
        entry.phase = .ready
        var slot = ReadySlot(id: entry.record.id, order: entry.record.runOrder)
        if let prefix = configuration.fairShareTagPrefix {
            let group = FairShareRounds.group(of: entry.record.tags, prefix: prefix)
            slot.round = state.fairShare.nextRound(for: group, weight: configuration.fairShareWeights[group] ?? 1)
        }
        state.ready.insert(slot)
    }

    /// Queues a slot for the first attempt of a scheduled operation that became due.
    func enqueueSlot(for id: String) {
        let window = slotWindow()
        let slots = state.withLock { state -> [AttemptSlot] in
            guard var entry = state.entries[id], case .scheduled = entry.phase else { return [] }
            state.seriesBetweenPeriods.remove(id)
            rejoinIsolation(id, in: &state)
            return queueOrHoldRefilling(&entry, in: &state, window: window)
        }
        for slot in slots { operationQueue.addOperation(slot) }
        noteRunProgress()   // it may have parked under a condition: a run waiting for it may end
    }

    /// Under the lock: `queueOrHold`, and stores the entry (parking its operation first if it
    /// waits, when `parksIfWaiting`: see `+Release`). When that gave it no slot while
    /// operations must run alone, the slots `fillSlots` gives now: the first of the isolation
    /// list may be one that cannot start (it waits for prerequisites or a date, or was parked
    /// just now), which must not hold this one and the rest back.
    func queueOrHoldRefilling(_ entry: inout Entry, in state: inout State, window: Int, parksIfWaiting: Bool = false) -> [AttemptSlot] {
        let id = entry.record.id
        let wasIsolationHead = state.isolation.first == id
        let slot = queueOrHold(&entry, in: &state, window: window)
        if parksIfWaiting { Self.parkIfWaiting(&entry) }
        state.entries[id] = entry
        if let slot { return [slot] }
        if wasIsolationHead || !state.isolation.isEmpty {
            return fillSlots(in: &state, window: window)
        }
        if case .ready = entry.phase, state.slotsInQueue == 0, state.isolationAfterOthers.contains(id) {
            // A suspect of kills became due with nothing else in flight: its turn may be now.
            return fillSlots(in: &state, window: window)
        }
        return []
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
            releaseLimits(of: leaving, in: &state)
            endReservations(of: leaving, leaving: true, in: &state)
            if var entry = state.entries[leaving.recordID], case .queued(let queued) = entry.phase, queued === leaving {
                hold(&entry, in: &state)
                state.entries[leaving.recordID] = entry
            } else {
                // Its attempt ended.
                endIsolation(of: leaving.recordID, in: &state)
            }
            return fillSlots(in: &state, window: window)
        }
        for slot in slots {
            operationQueue.addOperation(slot)
        }
        noteRunProgress()
    }

    private func makeSlot(for entry: Entry) -> AttemptSlot {
        AttemptSlot(
            recordID: entry.record.id,
            priority: Operation.QueuePriority(rawValue: entry.record.priority) ?? .normal,
            limitedTags: limitedTags(of: entry),
            rateLimitedTags: rateLimitedTags(of: entry),
            onStart: { [weak self] slot in
                guard let self else { return slot.release() }
                self.slotDidStart(slot)
            },
            onFinish: { [weak self] slot in self?.slotDidLeave(slot) }
        )
    }

    private func slotDidStart(_ slot: AttemptSlot) {
        enum Action { case release, start(Operation?, expiresAt: Date?), admit(@Sendable () -> Void) }
        // A slot the `OperationQueue` started as it was being suspended (a bounded run ending)
        // gives its place back: releasing it while its entry still waits for it queues a new
        // one, which waits in the suspended queue (see `slotDidLeave`).
        let isSuspended = operationQueue.isSuspended
        let action = state.withLock { state -> Action in
            guard var entry = state.entries[slot.recordID], case .queued(let queued) = entry.phase, queued === slot else {
                return .release
            }
            if isSuspended { return .release }
            if state.isShuttingDown && !state.isClosed {
                // Started as the shutdown suspended the queue: it starts nothing, and waits in
                // no heap (never given another slot) until the queue closes.
                entry.phase = .ready
                state.entries[slot.recordID] = entry
                return .release
            }
            if state.isClosed {
                // A closed queue starts nothing new (a timer of the closed queue may still fire
                // while another queue works on the store): only a retry of an attempt that was
                // running at the close goes on, unmanaged.
                defer { state.entries[slot.recordID] = entry }
                if entry.hasStarted, let admit = entry.pendingAdmission {
                    entry.phase = .running(slot)
                    entry.pendingAdmission = nil
                    return .admit(admit)
                }
                entry.phase = .ready   // in no heap: never given another slot
                return .release
            }
            if let head = state.isolation.first, head != slot.recordID {
                // Queued before an operation had to run alone (an add before `restore()`):
                // back to the ready operations until the isolated ones have run.
                return .release
            }
            defer { state.entries[slot.recordID] = entry }
            if parkUnlessConditionsHold(&entry, in: &state) {
                return .release   // a condition stopped holding while the slot waited
            }
            if parkUnlessStartsLeft(&entry, starting: slot, in: &state) {
                return .release   // (its reserved starts are there: kept for safety)
            }
            entry.phase = .running(slot)
            if !entry.hasStarted {
                entry.hasStarted = true
                return .start(entry.holdLiveOperation(), expiresAt: entry.record.expiresAt)
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
        case .start(let existing, let expiresAt):
            if let expiresAt, let expired = expiryBeforeFirstAttempt(of: slot.recordID, expiresAt: expiresAt) {
                // Due after its expiration date (its timer has not fired yet): no attempt.
                if let existing {
                    finishWithoutAttempt(existing, failingWith: expired)
                } else {
                    operationFinished(slot.recordID, outcome: .failed(expired))
                }
                return
            }
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
}
