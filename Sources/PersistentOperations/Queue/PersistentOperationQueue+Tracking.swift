import Foundation

// Tracking: how a stored operation becomes an entry of the queue — attached (its retries and its
// end report here), scheduled in the timer or queued at once, and, for a restored record, built
// from its file when its first attempt starts.

extension PersistentOperationQueue {
    /// Starts tracking newly stored operations (`operations[i]`, stored as `records[i]`) and
    /// schedules their first attempts, or blocks them until their prerequisites succeed
    /// (`liveIDs[i]`: see ``ResolvedPrerequisites``). All of them are entries before any is
    /// linked, so prerequisites within the group are found. An add whose operations have
    /// prerequisites calls this with `graphLock` held.
    /// `keepsOperationsAlive`: ``EnqueueOptions/keepsOperationAlive``; otherwise those that
    /// wait once scheduled are parked (see `+Release`).
    ///
    /// (The loops go by index and read the fields they need in place: a large batch's members
    /// are not copied whole at each step.)
    func track(_ operations: [Operation], records: [OperationRecord], liveIDs: [[String]], keepsOperationsAlive: Bool) {
        let members = operations.indices
        // Decided before the queue's own completion block is attached to a plain operation.
        let mayPark = operations.map { !keepsOperationsAlive && Self.mayPark($0) }
        for index in members {
            attach(operations[index], id: records[index].id, expiresAt: records[index].expiresAt)
        }
        let window = slotWindow()
        let now = timer.now
        typealias Linked = (ended: (id: String, ending: Entry.Ending)?, lane: (waits: Bool, ahead: Int))
        let (linked, queued, slots) = state.withLock { state -> ([Linked], [Bool], [AttemptSlot]) in
            // Parked operations of earlier adds that the app has let go of since: their entries
            // let go of them too, a few for each one added (see `+Release`).
            sweepReleasedOperations(budget: 2 * operations.count + 16, in: &state)
            var queued = [Bool](repeating: false, count: operations.count)
            var slots: [AttemptSlot] = []
            for index in members {
                let id = records[index].id
                // Its payload is in the store now: the entry keeps none (see `withStoredPayload`).
                var entry = Entry(record: records[index], operation: operations[index], attemptsInFlight: 0)
                entry.record.payload = Data()
                let key = ObjectIdentifier(operations[index])
                entry.operationKey = key
                state.idsByOperation[key] = id
                if let batch = records[index].batchID { state.batchMembers[batch, default: 0] += 1 }
                if !state.progressGroups.isEmpty { state.progressGroups.joined(records[index]) }
                if records[index].prerequisites.isEmpty, records[index].lane == nil, records[index].dueDate.map({ $0 <= now }) != false {
                    // Nothing to wait for (all of a plain batch): queued, or held for room
                    // (and parked), as it is stored.
                    queued[index] = true
                    slots += queueOrHoldRefilling(&entry, in: &state, window: window, parksIfWaiting: mayPark[index])
                } else {
                    state.entries.updateValue(entry, forKey: id)
                }
            }
            let linked = members.map { index -> Linked in
                guard !queued[index] else { return (nil, (false, 0)) }
                let id = records[index].id
                return (link(id, to: records[index].prerequisites, holdingFrom: liveIDs[index], in: &state), joinLane(id, in: &state))
            }
            scheduleProgressUpdate(in: &state)
            return (linked, queued, slots)
        }
        for slot in slots { operationQueue.addOperation(slot) }
        if queued.contains(true) { noteRunProgress() }
        // The others (with prerequisites, in a lane, or due later), one at a time.
        for index in members where !queued[index] {
            scheduleLinked(records[index].id, due: records[index].dueDate, ended: linked[index].ended, laneAhead: linked[index].lane.ahead)
        }
        for index in members {
            if let expiresAt = records[index].expiresAt { armExpiry(of: records[index].id, at: expiresAt) }
        }
        let parkable = members.filter { mayPark[$0] }
        guard !parkable.isEmpty else { return }
        parkIfWaiting(parkable.filter { !queued[$0] }.map { records[$0].id })
        // A cancel before it was parked found it held, and did nothing: hold it again.
        for index in parkable where operations[index].isCancelled {
            operationWasCancelled(records[index].id, operations[index])
        }
    }

    /// Starts tracking a restored (or re-queued) record whose operation is built later, when
    /// its first attempt starts; the caller schedules it. The payload is not kept: it is read
    /// from the store again when the operation is built or the record rewritten (an empty
    /// payload marks that; a stored payload never is empty).
    /// `suspect`: what the launches that died while its attempts were in flight left (see
    /// `+Isolation`).
    func trackRestored(_ record: OperationRecord, suspect: CrashSuspect? = nil) {
        var record = record
        record.payload = Data()
        let interrupted = suspect?.interruptedAttempts ?? 0
        // Attempts that were in flight when an earlier launch died were started too.
        record.numberOfAttempts += interrupted
        var entry = Entry(record: record, operation: nil, attemptsInFlight: interrupted)
        if let suspect {
            entry.crashes = suspect.crashes
            entry.kills = suspect.kills
            entry.hasSuspectFile = true
        }
        state.withLock { state in
            state.entries.updateValue(entry, forKey: record.id)
            if let batch = record.batchID { state.batchMembers[batch, default: 0] += 1 }
            if !state.progressGroups.isEmpty {
                state.progressGroups.joined(record)
                scheduleProgressUpdate(in: &state)
            }
            // A series that ended a period and has not started the next: idle until that is due.
            if record.isBetweenPeriods, interrupted == 0 {
                state.seriesBetweenPeriods.insert(record.id)
            }
        }
    }

    /// Connects an operation to the queue: its retries report here and wait in the queue's
    /// timer; a plain operation reports its end through its completion block.
    private func attach(_ operation: Operation, id: String, expiresAt: Date? = nil) {
        if let retrying = operation as? RetryingOperation {
            if let expiresAt { retrying.expirationDate = expiresAt }
            retrying.driver = OperationTracker(recordID: id, queue: self)
            if let handler = configuration.operationLogHandler, retrying.logHandler == nil {
                // Its messages say which stored operation they are about.
                var fields = ["operation_id": PersistentOperationID(record: id).description]
                if let persistent = operation as? any PersistentOperation {
                    fields["type"] = type(of: persistent).persistenceIdentifier
                }
                retrying.logHandler = handler.adding(fields)
            }
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
    /// next-attempt date), or queues it at once. One that must run alone next is set aside
    /// while it waits, so that the others are not held behind it (see `+Isolation`).
    func schedule(_ id: String, due: Date?) {
        if let due, due > timer.now {
            let token = timer.schedule(at: due) { [weak self] in self?.enqueueSlot(for: id) }
            let window = slotWindow()
            let scheduled = state.withLock { state -> (isStale: Bool, slots: [AttemptSlot]) in
                let isBeingScheduled = state.entries.withEntry(id) { entry -> Bool in
                    guard case .scheduled(nil) = entry.phase else { return false }
                    entry.phase = .scheduled(token)
                    return true
                }
                guard isBeingScheduled == true else { return (true, []) }
                guard state.isolation.first == id else { return (false, []) }
                return (false, fillSlots(in: &state, window: window))
            }
            if scheduled.isStale { token.cancel() }
            for slot in scheduled.slots { operationQueue.addOperation(slot) }
        } else {
            enqueueSlot(for: id)
        }
    }

    /// The live operation of `id`, built from its record first if it has not been yet.
    ///
    /// Returns `nil` when the queue no longer tracks `id`, or when the operation cannot be
    /// built (its type was unregistered, its record was damaged on disk, or its payload does
    /// not decode — a restore does not decode payloads, so this is where a bad one is found):
    /// the record is then quarantined, the event emitted, its dependents fail, and the entry
    /// is forgotten.
    /// `prefetched`: the record's type and payload read already (``RecordStore/readPendingPayloads(ids:)``),
    /// or `nil` to read them here.
    func operation(for id: String, prefetched: Result<(typeIdentifier: String, payload: Data), any Error>? = nil) -> Operation? {
        let found = state.withLock { state -> (operation: Operation?, entry: Entry?, type: RegisteredType?) in
            guard let entry = state.entries[id] else { return (nil, nil, nil) }
            if let operation = entry.operation { return (operation, nil, nil) }
            if entry.parkedOperation != nil, let parked = state.entries[id]?.holdLiveOperation() { return (parked, nil, nil) }
            return (nil, entry, state.registry[entry.record.typeIdentifier])
        }
        if let operation = found.operation { return operation }
        guard let entry = found.entry else { return nil }
        var record = entry.record
        let built: Operation
        var failure = "the operation could not be rebuilt from its record"
        do {
            if record.payload.isEmpty {
                // (A prefetch that failed is not trusted: read again, now.)
                let stored = try (try? prefetched?.get()) ?? store.readPendingPayload(id: id)
                guard stored.typeIdentifier == record.typeIdentifier else {
                    throw PersistenceError(.corruptRecord, "the record's type changed on disk to \"\(stored.typeIdentifier)\"")
                }
                record.payload = stored.payload
            }
            guard let type = found.type else {
                throw PersistenceError(.unknownType, "\"\(record.typeIdentifier)\" is no longer registered")
            }
            // The payload is checked here, not by the restore: a restore reads only what
            // scheduling needs.
            failure = "the payload does not decode as \"\(record.typeIdentifier)\" (payload version \(record.payloadVersion))"
            built = try type.makeOperation(record.payload, record.payloadVersion)
        } catch {
            // Cancelled and forgotten meanwhile (its record removed): nothing to quarantine.
            guard state.withLock({ $0.entries[id] != nil }) else { return nil }
            quarantineUnbuildable(record, reason: "\(failure): \(error)")
            return nil
        }
        built.queuePriority = Operation.QueuePriority(rawValue: record.priority) ?? .normal
        if let retrying = built as? RetryingOperation {
            retrying.expirationDate = record.expiresAt
            // Only restored, re-queued and parked entries are built here (other added
            // operations come built), and before their first attempt, so the record (whose
            // attempts include those in flight at the crash) is still as the restore, the
            // requeue or the add left it.
            let attempts = record.numberOfAttempts
            retrying.restoreProgress(RetryingOperation.RestoredProgress(
                numberOfRetries: record.numberOfRetries,
                numberOfAttempts: attempts,
                resumesAsRetry: attempts > 0,
                units: record.progressUnits.map { ($0.completed, $0.total) }
            ))
        }
        attach(built, id: id)
        // Another thread may have built it meanwhile: the first one installed wins, and the
        // other, never started, is dropped.
        return state.withLock { state -> Operation? in
            guard var entry = state.entries[id] else { return nil }
            if let existing = entry.holdLiveOperation() { return existing }
            entry.operation = built
            // A parked operation that no longer exists leaves its key behind: gone with it.
            if let key = entry.operationKey, state.idsByOperation[key] == id { state.idsByOperation[key] = nil }
            entry.operationKey = ObjectIdentifier(built)
            state.entries[id] = entry
            state.idsByOperation[ObjectIdentifier(built)] = id
            return built
        }
    }

    /// Quarantines the record of an operation that could not be built, for `reason`, and
    /// forgets it; its dependents fail, naming it.
    private func quarantineUnbuildable(_ record: OperationRecord, reason: String) {
        graphLock.lock()
        failedAreaLock.lock()
        let dependents = state.withLock { beginEnding(record.id, as: .failed, in: &$0) }
        do {
            let name = try store.quarantinePending(id: record.id, reason: reason)
            hub.emit(.quarantined(entryName: name, reason: reason))
        } catch {
            reportStoreError(record.id, "could not quarantine a record whose operation cannot be rebuilt; it was not run: \(error)")
        }
        abandon(dependents, because: record.id, ending: .failed, reason: "it could not be read and was quarantined")
        failedAreaLock.unlock()
        graphLock.unlock()
        store.clearAttemptsInFlight(forRecord: record.id)
        forget(record.id)
    }

    /// How many slots may sit in the `OperationQueue` at a time: enough to keep every one of
}
