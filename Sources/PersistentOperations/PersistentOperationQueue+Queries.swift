import Foundation

extension PersistentOperationQueue {
    // MARK: - Queries

    /// The identifier under which `operation` was stored, while the queue tracks it.
    ///
    /// ```swift
    /// let upload = UploadOperation(payload: payload)
    /// try queue.addOperation(upload)
    /// let id = queue.identifier(of: upload)!
    /// ```
    public func identifier(of operation: Operation) -> PersistentOperationID? {
        state.withLock { state -> String? in
            // The key of a parked operation that no longer exists may name another object now.
            guard let id = state.idsByOperation[ObjectIdentifier(operation)], state.entries[id]?.liveOperation === operation else { return nil }
            return id
        }.map(PersistentOperationID.init(record:))
    }

    /// Every unfinished operation, in run order (priority, then enqueue order).
    ///
    /// ```swift
    /// for info in queue.operations() { print(info.id, info.state) }
    /// ```
    public func operations() -> [PersistentOperationInfo] {
        snapshot { _ in true }
    }

    /// The unfinished operation with identifier `id`, if any.
    ///
    /// ```swift
    /// if let info = queue.operation(withID: id), info.state == .waitingToRetry {
    ///     print("retry \(info.numberOfRetries) due at \(String(describing: info.nextAttemptAt))")
    /// }
    /// ```
    public func operation(withID id: PersistentOperationID) -> PersistentOperationInfo? {
        snapshot { $0.record.id == id.rawValue }.first
    }

    /// The unfinished operation added with unique key `key`, if any (a cancelled or replaced
    /// one no longer holds its key).
    ///
    /// ```swift
    /// let sync = queue.operation(withUniqueKey: "nightly-sync")
    /// ```
    public func operation(withUniqueKey key: String) -> PersistentOperationInfo? {
        snapshot { !$0.isCancelRequested && $0.record.uniqueKey == key }.first
    }

    /// The unfinished operations carrying `tag`, in run order.
    ///
    /// ```swift
    /// let albumUploads = queue.operations(taggedWith: "album:42")
    /// ```
    public func operations(taggedWith tag: String) -> [PersistentOperationInfo] {
        snapshot { $0.record.tags.contains(tag) }
    }

    /// The unfinished operations of `lane` (``EnqueueOptions/lane``), in lane order: the
    /// lane's current operation first (``PersistentOperationInfo/lanePosition`` 0), then the
    /// ones waiting for their turn.
    ///
    /// ```swift
    /// let outgoing = queue.operations(inLane: "chat:42")
    /// ```
    public func operations(inLane lane: String) -> [PersistentOperationInfo] {
        snapshot(inEnqueueOrder: true) { $0.record.lane == lane }
    }

    /// How many unfinished operations carry `tag`, without building any of them (a restored
    /// operation is built only when it runs or a query like ``operations(taggedWith:)`` asks
    /// for it).
    ///
    /// ```swift
    /// badge.value = queue.numberOfOperations(taggedWith: "chat:42")
    /// ```
    public func numberOfOperations(taggedWith tag: String) -> Int {
        state.withLock { state in state.entries.count { tags, _ in tags.contains(tag) } }
    }

    /// How many unfinished operations `lane` holds (its current one included), without
    /// building any of them.
    ///
    /// ```swift
    /// let unsent = queue.numberOfOperations(inLane: "chat:42")
    /// ```
    public func numberOfOperations(inLane lane: String) -> Int {
        state.withLock { state in
            guard let entry = state.lanes[lane] else { return 0 }
            return entry.waitingCount + (entry.current == nil ? 0 : 1)
        }
    }

    /// The unfinished operations of type `type`, in run order.
    ///
    /// ```swift
    /// let uploads = queue.operations(ofType: UploadOperation.self)
    /// ```
    public func operations<Op: PersistentOperation>(ofType type: Op.Type) -> [PersistentOperationInfo] {
        snapshot { $0.record.typeIdentifier == Op.persistenceIdentifier }
    }

    /// Pending records of types that were never registered: kept on disk, never run.
    public var unknownTypeRecords: [UnknownTypeRecord] {
        state.withLock { Array($0.unknownTypeRecords.values) }.sorted { $0.id.rawValue < $1.id.rawValue }
    }

    /// The earliest moment an operation of the queue is due to start an attempt: now (the
    /// queue's clock) when one is due already, `nil` when none will become due by time alone.
    ///
    /// Counted: operations due now (waiting for a slot, or for run conditions — they may hold
    /// when the app next runs), not-before dates, and the dates of retries waiting on a timer.
    /// Not counted: attempts running now, operations waiting for their prerequisites (they
    /// become due when those succeed), and retries waiting for a retry helper other than a
    /// timer. Call it after ``restore()``: before, the records an earlier launch left are not
    /// known yet. An app hands it to the system as the earliest start of its next background
    /// run.
    ///
    /// ```swift
    /// if let next = queue.nextDueDate {
    ///     print("submit a background request for \(next)")
    /// }
    /// ```
    public var nextDueDate: Date? {
        let now = timer.now
        return state.withLock { state -> Date? in
            var earliest: Date?
            for entry in state.entries.values {
                let due: Date?
                switch entry.phase {
                case .ready, .queued, .waitingForConditions:
                    due = now
                case .scheduled:
                    due = max(entry.record.dueDate ?? now, now)
                case .waitingToRetry:
                    due = entry.record.nextAttemptAt.map { max($0, now) }
                case .running, .blocked:
                    due = nil
                }
                if let due, due < (earliest ?? .distantFuture) {
                    earliest = due
                    if due == now { break }
                }
            }
            return earliest
        }
    }

    /// How many operations the queue holds, by state, and how many records sit in the
    /// failed and quarantine areas.
    ///
    /// ```swift
    /// let counts = try queue.counts()
    /// print("\(counts.pending) pending, \(counts.failed) failed")
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when an area directory cannot be listed.
    public func counts() throws -> PersistentQueueCounts {
        var counts = PersistentQueueCounts()
        state.withLock { state in
            for entry in state.entries.values {
                switch entry.infoState {
                case .scheduled: counts.scheduled += 1
                case .queued: counts.queued += 1
                case .running: counts.running += 1
                case .waitingToRetry: counts.waitingToRetry += 1
                case .waitingForPrerequisites: counts.waitingForPrerequisites += 1
                case .waitingForConditions: counts.waitingForConditions += 1
                case .waitingForLane: counts.waitingForLane += 1
                }
            }
            counts.unknownType = state.unknownTypeRecords.count
        }
        counts.failed = try store.failedRecordIdentifiers().count
        counts.quarantined = try store.quarantinedEntryNames().count
        return counts
    }

    /// Snapshots of the entries `isIncluded` accepts, in run order (or, `inEnqueueOrder`, in
    /// the order they were added: a lane's order).
    private func snapshot(inEnqueueOrder: Bool = false, where isIncluded: (Entry) -> Bool) -> [PersistentOperationInfo] {
        let (entries, graph, positions) = state.withLock { state -> ([Entry], [String: (unfinished: [PersistentOperationID], dependents: [PersistentOperationID])], [String: Int]) in
            let entries = state.entries.values.filter(isIncluded)
            var graph: [String: (unfinished: [PersistentOperationID], dependents: [PersistentOperationID])] = [:]
            for entry in entries where !entry.record.prerequisites.isEmpty || state.dependents[entry.record.id] != nil {
                let dependents = (state.dependents[entry.record.id] ?? []).filter { state.entries[$0] != nil }
                graph[entry.record.id] = (unfinishedPrerequisites(of: entry.record, in: state), dependents.map(PersistentOperationID.init(record:)))
            }
            let lanes = Set(entries.compactMap(\.record.lane))
            return (entries, graph, lanes.isEmpty ? [:] : lanePositions(of: lanes, in: state))
        }
        // The payloads of the operations to build, read together (a restore leaves many).
        let unbuilt = entries.filter { $0.operation == nil && $0.parkedOperation == nil && $0.record.payload.isEmpty }.map(\.record.id)
        let payloads = unbuilt.count > 1 ? store.readPendingPayloads(ids: unbuilt) : [:]
        return entries
            .sorted { inEnqueueOrder ? $0.record.enqueueSequence < $1.record.enqueueSequence : OperationRecord.runsBefore($0.record, $1.record) }
            .compactMap { entry in
                let record = entry.record
                // A restored operation not built yet is built now; one that cannot be is
                // quarantined and left out.
                guard let operation = entry.operation ?? operation(for: record.id, prefetched: payloads[record.id]) else { return nil }
                var info = PersistentOperationInfo(
                    id: PersistentOperationID(record: record.id),
                    typeIdentifier: record.typeIdentifier,
                    operation: operation,
                    state: entry.infoState,
                    tags: Set(record.tags),
                    uniqueKey: record.uniqueKey,
                    priority: Operation.QueuePriority(rawValue: record.priority) ?? .normal,
                    enqueuedAt: record.enqueuedAt,
                    notBefore: record.notBefore,
                    numberOfRetries: record.numberOfRetries,
                    numberOfAttempts: record.numberOfAttempts,
                    nextAttemptAt: record.nextAttemptAt,
                    prerequisites: record.prerequisites.map(PersistentOperationID.init(record:)),
                    unfinishedPrerequisites: graph[record.id]?.unfinished ?? [],
                    dependents: graph[record.id]?.dependents ?? []
                )
                info.expirationDate = record.expiresAt
                info.conditions = Set(record.conditions)
                info.repeating = record.repeatInterval.map { RepeatSchedule(interval: $0, flex: record.repeatFlex) }
                info.periodTarget = record.periodTarget
                info.completedPeriods = record.completedPeriods
                info.lastErrorDescription = record.lastErrorDescription
                info.lane = record.lane
                info.lanePosition = positions[record.id]
                info.holdsLaneOnFailure = record.laneHoldsOnFailure
                return info
            }
    }

    // MARK: - Cancelling

    /// Cancels the operation with identifier `id`; its record is removed once it finishes.
    /// Returns whether the queue had such an operation.
    ///
    /// An operation waiting for a retry or a not-before date finishes at once; a running
    /// attempt is asked to stop (`RetryingOperation/cancelBaseOperation()`).
    ///
    /// ```swift
    /// queue.cancelOperation(withID: id)
    /// ```
    @discardableResult
    public func cancelOperation(withID id: PersistentOperationID) -> Bool {
        cancelAll { $0.record.id == id.rawValue } > 0
    }

    /// Cancels every operation carrying `tag` and returns how many there were.
    ///
    /// ```swift
    /// queue.cancelOperations(taggedWith: "album:42")
    /// ```
    @discardableResult
    public func cancelOperations(taggedWith tag: String) -> Int {
        cancelAll { $0.record.tags.contains(tag) }
    }

    /// Cancels every operation of type `type` and returns how many there were.
    ///
    /// ```swift
    /// queue.cancelOperations(ofType: UploadOperation.self)
    /// ```
    @discardableResult
    public func cancelOperations<Op: PersistentOperation>(ofType type: Op.Type) -> Int {
        cancelAll { $0.record.typeIdentifier == Op.persistenceIdentifier }
    }

    /// Cancels every operation of the queue.
    ///
    /// ```swift
    /// queue.cancelAllOperations()
    /// ```
    public func cancelAllOperations() {
        cancelAll { _ in true }
    }

    @discardableResult
    private func cancelAll(where isIncluded: (Entry) -> Bool) -> Int {
        let ids = state.withLock { $0.entries.values.filter(isIncluded).map(\.record.id) }
        for id in ids {
            cancel(id)
        }
        return ids.count
    }

    // MARK: - Failed area

    /// The records of the failed (dead-letter) area, oldest first. Unreadable entries found
    /// there are quarantined.
    ///
    /// ```swift
    /// for failed in try queue.failedOperations() { print(failed.id, failed.reason) }
    /// ```
    public func failedOperations() throws -> [FailedOperationInfo] {
        // Loading finishes interrupted moves; it must not see a re-queue halfway.
        failedAreaLock.lock()
        defer { failedAreaLock.unlock() }
        return try store.loadFailed().records.map { record in
            FailedOperationInfo(
                id: PersistentOperationID(record: record.id),
                typeIdentifier: record.typeIdentifier,
                reason: record.failureReason ?? "unknown",
                numberOfRetries: record.numberOfRetries,
                // Attempts moved aside by crash-loop protection were in flight, not saved.
                numberOfAttempts: record.numberOfAttempts + record.attemptsInFlight,
                tags: Set(record.tags),
                enqueuedAt: record.enqueuedAt,
                prerequisites: record.prerequisites.map(PersistentOperationID.init(record:)),
                failedPrerequisite: record.failedPrerequisite.map(PersistentOperationID.init(record:))
            )
        }
    }

    /// Moves a failed record back to the pending area with a fresh retry budget and
    /// schedules it. A `RetryingOperation` that had made attempts is started with
    /// `isRetry: true`.
    ///
    /// The operations that failed *because* this one failed (its dependents, and theirs) are
    /// re-queued with it, still waiting for it: they run once it succeeds. A re-queued
    /// operation whose other prerequisites are still in the failed area fails again at once.
    ///
    /// ```swift
    /// try queue.retryFailedOperation(withID: failed.id)
    /// ```
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when there is no such failed
    ///   record, and write errors.
    public func retryFailedOperation(withID id: PersistentOperationID) throws {
        try checkOpen()
        graphLock.lock()
        defer { graphLock.unlock() }
        failedAreaLock.lock()
        defer { failedAreaLock.unlock() }
        // Dependents first, deepest first: a crash halfway leaves dependents pending while
        // their prerequisite is still failed, and the next restore fails them again.
        var dependentsByCause: [String: [String]] = [:]
        for record in try store.loadFailed().records {
            if let cause = record.failedPrerequisite { dependentsByCause[cause, default: []].append(record.id) }
        }
        var order = [id.rawValue]
        var index = 0
        while index < order.count {
            order += dependentsByCause[order[index]] ?? []
            index += 1
        }
        var records: [OperationRecord] = []
        for member in order.dropFirst().reversed() {
            records.append(try store.requeueFailed(id: member))
        }
        records.append(try store.requeueFailed(id: id.rawValue))
        schedule(requeued: records.sorted(by: OperationRecord.runsBefore))
    }

    /// Moves every failed record back to the pending area with a fresh retry budget,
    /// schedules them, and returns their identifiers in run order. Dependencies among them
    /// hold again: a dependent waits for its re-queued prerequisite.
    ///
    /// ```swift
    /// let requeued = try queue.retryAllFailedOperations()
    /// ```
    @discardableResult
    public func retryAllFailedOperations() throws -> [PersistentOperationID] {
        try checkOpen()
        graphLock.lock()
        defer { graphLock.unlock() }
        failedAreaLock.lock()
        defer { failedAreaLock.unlock() }
        let records = try store.requeueAllFailed()
        schedule(requeued: records)
        return records.map { PersistentOperationID(record: $0.id) }
    }

    /// Deletes a failed record for good.
    ///
    /// ```swift
    /// try queue.purgeFailedOperation(withID: failed.id)
    /// ```
    public func purgeFailedOperation(withID id: PersistentOperationID) throws {
        try checkOpen()
        failedAreaLock.lock()
        defer { failedAreaLock.unlock() }
        try store.purgeFailed(id: id.rawValue)
        // The lane it held, if any, moves on.
        scheduleUnblocked(state.withLock { releaseLane(heldBy: id.rawValue, in: &$0) })
    }

    /// Deletes every failed record and returns how many there were.
    ///
    /// ```swift
    /// try queue.purgeAllFailedOperations()
    /// ```
    @discardableResult
    public func purgeAllFailedOperations() throws -> Int {
        try checkOpen()
        failedAreaLock.lock()
        defer { failedAreaLock.unlock() }
        let purged = try store.purgeAllFailed()
        // Every lane a failed record held moves on.
        scheduleUnblocked(state.withLock { state in
            Array(state.laneHolders.keys).flatMap { releaseLane(heldBy: $0, in: &state) }
        })
        return purged
    }

    /// Moves a record from the quarantine area back to the pending area and schedules it: for
    /// a payload that did not decode, once a build that reads it ships (a fixed type, or a
    /// ``PersistentOperation/migratePayload(_:)`` for its payload version).
    ///
    /// The record comes back as it was stored — its identifier, retry count, dates and
    /// prerequisites (a prerequisite that failed meanwhile fails it again). `name` is the
    /// entry's name in ``RestoreReport/quarantined``, the
    /// ``PersistentOperationEvent/quarantined(entryName:reason:)`` event, or
    /// ``ReadOnlyPersistentStore/quarantinedEntries()``. `store-inspector requeue-quarantined`
    /// does the same on a store no app holds.
    ///
    /// ```swift
    /// for entry in try ReadOnlyPersistentStore(directory: storeURL).quarantinedEntries() {
    ///     _ = try? queue.requeueQuarantinedOperation(named: entry.name)   // skips what still fails
    /// }
    /// ```
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when there is no such entry;
    ///   ``PersistenceError/Code/corruptRecord`` when it is not a readable record (damaged bytes
    ///   stay in quarantine); ``PersistenceError/Code/unknownType`` when its type is not
    ///   registered; ``PersistenceError/Code/payloadNotDecodable`` when its payload still does
    ///   not decode (the entry stays where it is); and write errors.
    @discardableResult
    public func requeueQuarantinedOperation(named name: String) throws -> PersistentOperationID {
        try checkOpen()
        graphLock.lock()
        defer { graphLock.unlock() }
        let record = try store.quarantinedRecord(named: name)
        guard let type = state.withLock({ $0.registry[record.typeIdentifier] }) else {
            throw PersistenceError(.unknownType, "The quarantined record \(name) is of type \"\(record.typeIdentifier)\", which is not registered; register it first.")
        }
        do {
            try type.checkPayload(record.payload, record.payloadVersion)
        } catch {
            throw PersistenceError(
                .payloadNotDecodable,
                "The payload of the quarantined record \(name) (payload version \(record.payloadVersion)) still does not decode as \"\(record.typeIdentifier)\": \(error). It stays in quarantine.",
                underlyingError: error
            )
        }
        let requeued = try store.requeueQuarantined(named: name)
        schedule(requeued: [requeued])
        return PersistentOperationID(record: requeued.id)
    }

    /// Tracks re-queued records like restored ones (built when due), then links them to
    /// their prerequisites and schedules them. Called with `graphLock` held.
    private func schedule(requeued records: [OperationRecord]) {
        var report = RestoreReport()
        var requeued: [RestoredRecord] = []
        for record in records {
            // Built when due, like a restored record (its retry count was reset by the requeue);
            // its payload is checked now, so that a re-queue of a few records reports a bad one.
            guard isRebuildable(record, checkingPayload: true, report: &report) else { continue }
            hub.emit(enqueued: [record])
            trackRestored(record)
            requeued.append(RestoredRecord(
                id: record.id, order: record.runOrder, due: record.dueDate,
                prerequisites: record.prerequisites, lane: record.lane
            ))
        }
        // A prerequisite still in the failed area fails its re-queued dependents again.
        do {
            requeued = try settlePrerequisites(of: requeued, unavailable: [], quarantined: [], cancelled: [], report: &report)
        } catch {
            // The failed area could not be listed: a dependent re-queued here might run before a
            // failed prerequisite, so those with prerequisites stay on disk for the next restore.
            reportStoreError(nil, "could not check the prerequisites of re-queued operations; those with prerequisites run after the next restore: \(error)")
            let held = requeued.filter { !$0.prerequisites.isEmpty }.map(\.id)
            state.withLock { state in
                for id in held {
                    if let entry = state.entries.removeValue(forKey: id) { left(entry.record, ended: false, in: &state) }
                }
            }
            requeued.removeAll { !$0.prerequisites.isEmpty }
        }
        // In enqueue order within each lane; a record that held its lane takes it back.
        let linked = state.withLock { state in
            let ended = requeued.map { link($0.id, to: $0.prerequisites, in: &state) }
            var lanes: [String: (waits: Bool, ahead: Int)] = [:]
            for record in requeued.filter({ $0.lane != nil }).sorted(by: { $0.order.enqueueSequence < $1.order.enqueueSequence }) {
                lanes[record.id] = joinLane(record.id, in: &state)
            }
            return zip(requeued, ended).map { (ended: $1, lane: lanes[$0.id] ?? (false, 0)) }
        }
        for (record, linked) in zip(requeued, linked) {
            scheduleLinked(record.id, due: record.due, ended: linked.ended, laneAhead: linked.lane.ahead)
        }
    }
}
