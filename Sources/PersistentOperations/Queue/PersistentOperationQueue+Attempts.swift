import Foundation

// Attempts and waits: each attempt is counted in its marker (crash-loop protection) before it
// starts; a retry's count and next-attempt date are saved before its wait starts, freeing the
// slot; a due retry queues a new slot whose start admits it.

extension PersistentOperationQueue {
    /// Counts the attempt in its marker (for crash-loop protection) and reports it.
    func attemptWillStart(_ id: String, attempt: Int?) {
        struct Start { var inFlight: Int, attempt: Int, crashes: Int, kills: Int, runsAlone: Bool, hadSuspectFile: Bool }
        let start = state.withLock { state -> Start? in
            guard var entry = state.entries[id] else { return nil }
            defer { state.entries[id] = entry }
            entry.attemptsInFlight += 1
            entry.record.numberOfAttempts = attempt ?? entry.record.numberOfAttempts + 1
            entry.attemptStartedAt = DispatchTime.now().uptimeNanoseconds
            entry.attemptEndedAt = 0
            defer { entry.hasSuspectFile = false }
            return Start(
                inFlight: entry.attemptsInFlight, attempt: entry.record.numberOfAttempts, crashes: entry.crashes, kills: entry.kills,
                // The first isolated operation holds the only slot until this attempt ends.
                runsAlone: state.isolation.first == id, hadSuspectFile: entry.hasSuspectFile
            )
        }
        guard let start else { return }
        do {
            try store.setAttemptsInFlight(start.inFlight, crashes: start.crashes, kills: start.kills, runsAlone: start.runsAlone, forRecord: id)
        } catch {
            reportStoreError(id, "could not record the start of an attempt: \(error)")
        }
        // The marker now carries what the suspect file said.
        if start.hadSuspectFile { store.clearSuspect(forRecord: id) }
        let operationID = PersistentOperationID(record: id)
        if start.runsAlone { hub.emit(.runningAlone(operationID, crashes: start.crashes + start.kills)) }
        hub.emit(.started(operationID, attempt: start.attempt))
    }

    /// Saves the retry count and next-attempt date, then frees the attempt's slot.
    func operationWillWait(_ id: String, _ wait: RetryingOperation.WaitInfo, progress: (completed: Int64, total: Int64)? = nil) {
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
            if let progress {
                // Kept with the record: a restored operation's progress starts there.
                entry.record.progressUnits = OperationRecord.ProgressUnits(completed: progress.completed, total: progress.total)
            }
            entry.attemptsInFlight = 0
            entry.attemptEndedAt = DispatchTime.now().uptimeNanoseconds
            // The attempt ended without crashing the process: no crash or kill on file any more.
            entry.crashes = 0
            entry.kills = 0
            var slot: AttemptSlot?
            if case .running(let running) = entry.phase { slot = running }
            entry.phase = .waitingToRetry
            state.retriesBeingSaved.insert(id)
            return (entry.record, slot)
        }
        guard let change else { return }
        do {
            try store.update(try withStoredPayload(change.record))
        } catch {
            reportStoreError(id, "could not save the retry; after a crash the operation resumes from its previous record: \(error)")
        }
        store.clearAttemptsInFlight(forRecord: id)
        hub.emit(.retryScheduled(
            PersistentOperationID(record: id), isCounted: wait.isCounted,
            numberOfRetries: wait.numberOfRetriesOnRetry, nextAttemptAt: change.record.nextAttemptAt
        ))
        state.withLock { _ = $0.retriesBeingSaved.remove(id) }
        change.slot?.release()
    }

    /// A retry is due: queue a slot whose start admits it.
    func admissionRequested(_ id: String, admit: @escaping @Sendable () -> Void) {
        let window = slotWindow()
        let outcome = state.withLock { state -> (isTracked: Bool, slots: [AttemptSlot]) in
            guard var entry = state.entries[id], case .waitingToRetry = entry.phase else { return (false, []) }
            entry.pendingAdmission = admit
            return (true, queueOrHoldRefilling(&entry, in: &state, window: window))
        }
        guard outcome.isTracked else {
            // Not tracked (the queue was closed): let the operation go on unmanaged.
            admit()
            return
        }
        for slot in outcome.slots { operationQueue.addOperation(slot) }
        noteRunProgress()   // it may have parked under a condition: a run waiting for it may end
    }
}
