import Foundation

// Restore: the records an earlier run left pending are read one at a time, checked (type
// registered, crash-loop count, expiry), tracked as small entries and scheduled in run order;
// each payload is decoded, and its operation built, only when its first attempt starts.

extension PersistentOperationQueue {
    /// Re-adds every operation an earlier run left pending, and reports what could not be.
    ///
    /// Each readable record is rebuilt through the type registered for its
    /// ``PersistentOperation/persistenceIdentifier`` (never from a class name) and scheduled
    /// in priority, then enqueue, order. A `RetryingOperation` continues its retry count,
    /// is told `isRetry: true` if it had made an attempt, and waits for its saved
    /// next-attempt date. An attempt that was running when the process died runs again.
    ///
    /// Nothing in the store can crash the process or stop the other records from running:
    /// - corrupt, truncated, oversized or non-file entries are moved to the quarantine area
    ///   (``RestoreReport/quarantined``); a payload is decoded only when its operation is
    ///   built (when its first attempt starts, or a query asks for it), so a record whose
    ///   payload does not decode is quarantined then, reported by
    ///   ``PersistentOperationEvent/quarantined(entryName:reason:)``, and its dependents fail;
    /// - records of unregistered types are left on disk untouched (``RestoreReport/unknownTypes``);
    /// - an operation that crashed the process ``Configuration/crashLoopLimit`` times while
    ///   its attempt was the only one in flight — or got it killed that many launches in a
    ///   row while it ran alone and the app was active (``applicationState``) — is moved to the
    ///   failed area (``RestoreReport/movedToFailedAfterCrashes``); the operations that were in
    ///   flight beside others when the last launch crashed run their next attempts alone, one
    ///   at a time, before anything else, and those in flight when it was killed while active
    ///   run alone once the other due work is done (``RestoreReport/runAlone``). A kill while
    ///   the app was not active counts against nobody. See <doc:ResumingAfterACrash>.
    ///
    /// Records already tracked (added in this run, or restored before) are skipped, so a
    /// second call restores nothing twice.
    ///
    /// Operations other processes left in the store's inbox (``PersistentOperationInbox``)
    /// are taken in first, as adds of this launch, unless
    /// ``Configuration/takesOperationsFromOtherProcesses`` is `false`.
    ///
    /// Unique keys: adds made before this call already saw the stored records (see
    /// ``EnqueueOptions/uniqueKey``), so a record one of them kept is restored here, and one
    /// it replaced is gone with its dependents. Of two stored records with the same unique
    /// key — a replacement a crash interrupted after storing the new record — only the newer
    /// is restored; the records that depend on the older one are cancelled (their removals
    /// synced), then it is removed and reported in ``RestoreReport/removedAsReplaced``.
    ///
    /// ```swift
    /// queue.register(UploadOperation.self)
    /// let report = try queue.restore()
    /// print("resumed \(report.restored.count) operations, quarantined \(report.quarantined.count)")
    /// ```
    ///
    /// - Throws: ``PersistenceError`` when the pending directory cannot be listed, or a bad
    ///   entry cannot be moved to the quarantine area;
    ///   ``PersistenceError/Code/storeNotWritable`` when the queue is closed or shutting down
    ///   (``shutDown(gracePeriod:stopGracePeriod:)``).
    @discardableResult
    public func restore() throws -> RestoreReport {
        try checkOpen()
        // Operations other processes left: stored (as this launch's adds) before the restore
        // reads the store, so that a letter an earlier launch stored but did not remove is
        // known by its key (see `+Inbox`).
        takeLettersBeforeRestore()
        // No prerequisite may end, and no failed record be re-queued, while the graph of the
        // restored records is resolved against the tracked ones.
        graphLock.lock()
        defer { graphLock.unlock() }
        // (Checked under the lock that a shutdown waits for: no restore runs as it closes.)
        if state.withLock({ $0.isShuttingDown }) {
            throw PersistenceError(.storeNotWritable, "The queue is shutting down.", fileURL: directory)
        }
        var suspects = store.suspects()
        // The suspects whose records are pending (the others' records are gone).
        var suspectsPending: Set<String> = []
        let committedBatches = try store.committedBatches()
        let batchesInProgress = state.withLock { $0.batchesInProgress }
        var referencedBatches: Set<String> = []
        let markersLeft = store.attemptMarkers()
        var report = RestoreReport()
        let now = timer.now
        let (tracked, newestTrackedByKey) = state.withLock { state in
            // The stored records become entries: the table of their keys that adds before a
            // restore read (see `+StoredKeys`) is dropped, and read again if this restore
            // throws before it completes.
            state.storedUniqueKeys = nil
            var newest: [String: UInt64] = [:]
            for entry in state.entries.values {
                if let key = entry.record.uniqueKey { newest[key] = max(newest[key] ?? 0, entry.record.enqueueSequence) }
            }
            return (Set(state.entries.keys), newest)
        }
        // Markers of records this launch does not track were left by an earlier launch whose
        // evidence could not be turned into suspect files at open (a full disk): suspects too.
        for (id, marker) in markersLeft where !tracked.contains(id) && suspects[id] == nil {
            suspects[id] = CrashSuspect(interruptedAttempts: marker.attempts, crashes: marker.crashes, runsAlone: true, kills: marker.kills)
        }

        // Records are taken one at a time as they are read, and only what scheduling needs
        // is kept of each (its payload is read again when the operation is built), so a
        // restore of many records never holds them all. Records with a unique key wait until
        // every record has been read, to know which of them is the newest.
        var restored: [RestoredRecord] = []
        var keyed: [OperationRecord] = []
        // One copy of each type identifier for all the records of that type.
        var typeIdentifiers: Set<String> = []
        func take(_ record: OperationRecord) {
            if suspects[record.id] != nil { suspectsPending.insert(record.id) }
            if let batch = record.batchID {
                guard committedBatches?.contains(batch) ?? true || batchesInProgress.contains(batch) else {
                    // Its `addOperations` never returned: the batch counts whole or not at all.
                    discardUncommitted(record, report: &report)
                    return
                }
                referencedBatches.insert(batch)
            }
            guard !tracked.contains(record.id) else { return }
            var record = record
            if let index = typeIdentifiers.firstIndex(of: record.typeIdentifier) {
                record.typeIdentifier = typeIdentifiers[index]
            } else {
                typeIdentifiers.insert(record.typeIdentifier)
            }
            if record.uniqueKey != nil {
                keyed.append(record)
            } else {
                admitRestored(record, suspect: suspects[record.id], now: now, into: &restored, report: &report)
            }
        }
        let loaded = try store.loadPending(reservingCapacity: { count in
            // Growing the table by doubling would briefly hold the old one beside the new.
            state.withLock { $0.entries.reserveCapacity($0.entries.count + count) }
            restored.reserveCapacity(count)
        }, plain: { fields in
            // Most records: only the fields every record has, no crash evidence on file and
            // nothing tracked before (see `admitPlain`); the others as any record.
            if suspects.isEmpty, tracked.isEmpty, self.admitPlain(fields, into: &restored) { return }
            take(fields.record)
        }, each: take)
        // Records of interrupted batches that the migration to the journal dropped.
        report.discardedFromUncommittedBatches += store.takeRecordsDiscardedByMigration().map(PersistentOperationID.init(record:))
        for entry in loaded.quarantined {
            let name = entry.quarantineName ?? entry.name
            report.quarantined.append(RestoreReport.Entry(name: name, reason: entry.reason))
            hub.emit(.quarantined(entryName: name, reason: entry.reason))
        }
        for entry in loaded.skipped {
            report.newerFormatVersions.append(RestoreReport.Entry(name: entry.name, reason: entry.reason))
        }

        var newest = newestTrackedByKey
        for record in keyed {
            if let key = record.uniqueKey { newest[key] = max(newest[key] ?? 0, record.enqueueSequence) }
        }
        // A replacement that a crash interrupted: the newer record wins. The older one is
        // removed after the records that depend on it (see below).
        var replaced: [String] = []
        for record in keyed {
            if let key = record.uniqueKey, let newestSequence = newest[key], newestSequence != record.enqueueSequence {
                replaced.append(record.id)
                continue
            }
            admitRestored(record, suspect: suspects[record.id], now: now, into: &restored, report: &report)
        }
        keyed = []
        for id in suspects.keys where !suspectsPending.contains(id) {
            // Its record is gone (removed before it was restored): nothing left to suspect.
            store.clearSuspect(forRecord: id)
        }

        for batch in (committedBatches ?? []).subtracting(referencedBatches).subtracting(batchesInProgress) {
            // Every record of the batch has finished: its marker has nothing left to commit.
            store.removeBatchMarker(batch)
        }
        restored.sort { $0.order < $1.order }
        // (`newerFormatVersions` lists the records of newer formats and those whose payloads a
        // newer build stored.)
        let unavailable = Set(
            report.unknownTypes.map(\.id.rawValue)
                + report.newerFormatVersions.compactMap { StoreLayout.recordIdentifier(fromFileName: $0.name) }
        )
        let quarantinedIDs = Set(loaded.quarantined.compactMap { StoreLayout.recordIdentifier(fromFileName: $0.name) })
        restored = try settlePrerequisites(
            of: restored, unavailable: unavailable, quarantined: quarantinedIDs,
            cancelled: Set(replaced), report: &report
        )
        // Only now that the records depending on them are gone (each removal synced): a
        // dependent must never outlive a cancelled prerequisite on disk, or the next restore
        // would take the prerequisite for one that succeeded.
        for id in replaced {
            do {
                try store.removePending(id: id)
                store.clearAttemptsInFlight(forRecord: id)
                report.removedAsReplaced.append(PersistentOperationID(record: id))
            } catch {
                reportStoreError(id, "could not remove a record replaced by a newer one with the same unique key: \(error)")
            }
        }
        report.restored = restored.map(\.operationID)
        report.unknownConditions = unknownConditions(of: restored.filter { !$0.conditions.isEmpty }.map { ($0.id, $0.conditions) })
        report.previousLaunchEnding = RestoreReport.LaunchEnding(previousLaunchEnding)
        report.previousLaunchApplicationState = previousLaunchWasActive ? .active : .inactive
        // Those that must run alone before other work: crashes on file first, so that a poison
        // operation is tried again before the others; then in run order (`restored` is sorted).
        // Then the suspects of kills, which run alone once nothing else is due: fewest kills on
        // file first, then in run order. An operation just blamed for a kill runs after the
        // others, so that kills from outside, which land on whatever runs, spread over them
        // rather than fall on it again; a poison is killed whenever its turn comes.
        let isolated = restored.filter { $0.runsAlone && !$0.runsAloneAfterOthers }.enumerated()
            .sorted { ($0.element.crashes, -$0.offset) > ($1.element.crashes, -$1.offset) }
            .map(\.element.id)
        let isolatedAfterOthers = restored.filter { $0.runsAlone && $0.runsAloneAfterOthers }.enumerated()
            .sorted { ($0.element.kills, $0.offset) < ($1.element.kills, $1.offset) }
            .map(\.element.id)
        report.runAlone = (isolated + isolatedAfterOthers).map { PersistentOperationID(record: $0) }
        // Reported before any of them is scheduled, so each `restored` event comes before
        // the operation's first `started`.
        if hub.hasSubscribers {
            // (Their types from the queue's table: a restored record does not keep its own.)
            let types = state.withLock { state in restored.map { state.entries.typeIdentifier(of: $0.key) ?? "" } }
            hub.emit(contentsOf: zip(restored, types).map { .restored($0.operationID, typeIdentifier: $1) })
        }
        hub.emit(contentsOf: report.unknownConditions.map { .unknownConditions($0.id, conditions: $0.conditions) })
        // Lanes: the failed records that hold theirs, and the restored records in enqueue order
        // within each lane (not run order: within a lane, order wins over priority).
        let laneMembers = restored.indices.filter { restored[$0].lane != nil }
            .sorted { restored[$0].order.enqueueSequence < restored[$1].order.enqueueSequence }
        var laneHolders: [(id: String, lane: String)] = []
        if !laneMembers.isEmpty || state.withLock({ !$0.lanes.isEmpty }) {
            do {
                laneHolders = try storedLaneHolders()
            } catch {
                reportStoreError(nil, "could not read which failed records hold their lanes; those lanes move on: \(error)")
            }
        }
        // Every restored entry exists before any is linked, so prerequisites among them are found.
        let (ended, laneTurns, positionsInLanes) = state.withLock { state -> ([Int: (id: String, ending: Entry.Ending)], [(id: String, due: Date?)], [String: Int]) in
            state.isolation += isolated
            state.isolationAfterOthers += isolatedAfterOthers
            // The prerequisites that ended badly, by position in `restored` (only records with
            // prerequisites have any: a list for every record would hold a million nils).
            var ended: [Int: (id: String, ending: Entry.Ending)] = [:]
            for index in restored.indices where !restored[index].prerequisites.isEmpty {
                ended[index] = link(restored[index].id, to: restored[index].prerequisites, in: &state)
            }
            state.hasRestored = true
            state.storedLanes = nil
            guard !laneMembers.isEmpty || !state.lanes.isEmpty else { return (ended, [], [:]) }
            holdLanes(laneHolders, in: &state)
            for index in laneMembers { joinLane(restored[index].id, in: &state) }
            // Adds made before this restore into lanes of stored records waited for them.
            let turns = advanceFreeLanes(in: &state)
            let positions = lanePositions(of: Set(laneMembers.compactMap { restored[$0].lane }), in: state)
            return (ended, turns, positions)
        }
        // The suspects of kills are scheduled last, in the order they run alone: due at once,
        // they wait for the others, and the first one due runs once nothing else is.
        func schedule(_ record: RestoredRecord, ended: (id: String, ending: Entry.Ending)?) {
            let id = record.id
            scheduleLinked(id, due: record.due, ended: ended, laneAhead: positionsInLanes.isEmpty ? nil : positionsInLanes[id])
            if let expiresAt = record.expiresAt { armExpiry(of: id, at: expiresAt) }
        }
        // (Read before the loop below moves the records it readies to the front of `restored`.)
        let restoredLaneIDs = laneTurns.isEmpty ? [] : Set(laneMembers.map { restored[$0].id })
        var afterOthers: [String: (record: RestoredRecord, ended: (id: String, ending: Entry.Ending)?)] = [:]
        if !isolatedAfterOthers.isEmpty {
            for index in restored.indices where restored[index].runsAloneAfterOthers {
                afterOthers[restored[index].id] = (restored[index], ended[index])
            }
        }
        // A backlog that is due waits in `ready` once the `OperationQueue`'s window is full:
        // plain records are readied a chunk at a time under one lock (see `holdRestored`) and
        // moved to the front of `restored`, which `ready` then takes over as its run, sorted
        // (no second copy of a large backlog); the others are scheduled one at a time.
        let window = slotWindow()
        var index = restored.startIndex
        var runEnd = restored.startIndex
        while index < restored.endIndex {
            let held = holdRestored(restored, from: index, ended: ended, window: window)
            if held > 0 {
                if runEnd != index {
                    for offset in 0..<held { restored[runEnd + offset] = restored[index + offset] }
                }
                runEnd += held
                index += held
                continue
            }
            if !restored[index].runsAloneAfterOthers { schedule(restored[index], ended: ended[index]) }
            index += 1
        }
        restored.removeSubrange(runEnd...)
        let slots = state.withLock { state -> [AttemptSlot] in
            state.ready.adoptRun(restored)
            // (Slots that left while the run was being readied gave their room to nothing.)
            return fillSlots(in: &state, window: window)
        }
        restored = []
        for slot in slots {
            operationQueue.addOperation(slot)
        }
        noteRunProgress()
        if !laneTurns.isEmpty {
            // The turns that came to entries added before this restore (the restored ones
            // are scheduled above).
            scheduleUnblocked(laneTurns.filter { !restoredLaneIDs.contains($0.id) })
        }
        for id in isolatedAfterOthers {
            if let (record, ended) = afterOthers[id] { schedule(record, ended: ended) }
        }
        log(.info, "restored \(report.restored.count) operations; \(report.quarantined.count) quarantined, \(report.unknownTypes.count) of unknown types, \(report.movedToFailedAfterCrashes.count) moved to failed after crashes") {
            [
                "restored": "\(report.restored.count)", "quarantined": "\(report.quarantined.count)",
                "unknown_types": "\(report.unknownTypes.count)", "moved_to_failed": "\(report.movedToFailedAfterCrashes.count)",
            ]
        }
        startTakingRequests()
        return report
    }

    /// Tracks a plain restored record (only the fields every record has: no batch, unique key,
    /// expiry, periodic series, prerequisites or lane) as ``admitRestored(_:suspect:now:into:report:)``
    /// would when no crash evidence is on file and nothing was tracked before the restore,
    /// straight from its fields: its entry made compact with no identifier text, and put in
    /// the table with one lookup. Returns false, having changed nothing, when it must take the
    /// general path (its type is not registered, or reads a later payload version; records of
    /// unknown types are on file; its counts do not fit a compact entry; its key is taken).
    private func admitPlain(_ fields: RecordFormat.PlainFields, into restored: inout [RestoredRecord]) -> Bool {
        let position = state.withLock { state -> Int32? in
            guard state.unknownTypeRecords.isEmpty, let type = state.registry[fields.typeIdentifier], type.payloadVersion >= 1,
                  let record = OperationRecord.Compact(plain: fields, type: state.entries.typeOrdinal(of: fields.typeIdentifier))
            else { return nil }
            let entry = Entry.Compact(record: record, timerToken: nil, attemptsInFlight: 0, isReady: false)
            let position = state.entries.insertCompact(entry, uuid: fields.key)
            if position != nil, !state.progressGroups.isEmpty {
                state.progressGroups.joinedPlain()
                scheduleProgressUpdate(in: &state)
            }
            return position
        }
        guard let position else { return false }
        var admitted = RestoredRecord(key: .uuid(fields.key), order: fields.runOrder, due: fields.dueDate)
        admitted.compactPosition = position
        restored.append(admitted)
        return true
    }

    /// The most restored records ``holdRestored(_:from:ended:window:)`` readies under one
    /// hold of the state lock.
    static let restoreHoldChunk = 4_096

    /// Readies the restored records from `start` on, as `schedule` would once the
    /// `OperationQueue`'s window is full, as long as they are plain (no prerequisites, lane,
    /// conditions, expiry or crash evidence: held compact), due and nothing else decides
    /// their turn (no operation runs alone, no pause, no fair sharing): each entry is made
    /// ready in place, at most ``restoreHoldChunk`` under one hold of the lock, and waits for
    /// `restore()` to give `ready` the records as its run. Returns how many it readied; 0 when
    /// the first must be scheduled one at a time.
    private func holdRestored(_ restored: [RestoredRecord], from start: Int, ended: [Int: (id: String, ending: Entry.Ending)], window: Int) -> Int {
        guard configuration.fairShareTagPrefix == nil else { return 0 }
        let end = min(restored.count, start + Self.restoreHoldChunk)
        let now = timer.now
        return state.withLock { state in
            guard state.slotsInQueue >= window, state.isolation.isEmpty, state.pauses.isEmpty else { return 0 }
            var index = start
            while index < end {
                let record = restored[index]
                guard record.isPlain, ended.isEmpty || ended[index] == nil, record.due.map({ $0 <= now }) ?? true,
                      state.entries.readyIfBeingScheduled(record.key, hint: record.compactPosition >= 0 ? record.compactPosition : nil)
                else { break }
                index += 1
            }
            return index - start
        }
    }

    /// What ``restore()`` keeps of a restored record until it is scheduled: 40 bytes, with
    /// what few records have (prerequisites, crash evidence, an expiration date, run
    /// conditions, an identifier not in canonical form, an order that does not fit) out of
    /// line, so that a restore of a million holds no more than it must. (Its type is read from
    /// the queue's table when an event needs it.)
    struct RestoredRecord: Sendable {
        /// The record's identifier as a UUID (zero when it is not in canonical form: then
        /// ``Rare/textKey`` holds it).
        private var uuid: UUIDBits
        /// The enqueue sequence in the low 56 bits, and the priority plus 128 in the high 8
        /// (an order that does not fit is ``Rare/wideOrder``).
        private var packedOrder: UInt64
        /// The due date's seconds since the reference date; NaN for none.
        private var dueInterval: Double
        /// What few records have, or, for the others, where the queue's table put the compact
        /// entry of one a restore admitted from its fields (see `admitPlain`).
        private var extra: Extra

        private enum Extra: Sendable {
            case rare(Rare)
            /// -1: none.
            case compactPosition(Int32)
        }

        /// The bits of the sequence ``packedOrder`` holds.
        private static let sequenceBits: UInt64 = 56

        /// Where the queue's table put its compact entry when a restore admitted it from its
        /// fields (see `EntryTable.readyIfBeingScheduled(_:hint:)`), else -1 (always for a
        /// record with rare fields, which is scheduled one at a time).
        var compactPosition: Int32 {
            get {
                guard case .compactPosition(let position) = extra else { return -1 }
                return position
            }
            set {
                guard case .compactPosition = extra else { return }
                extra = .compactPosition(newValue)
            }
        }

        private var rare: Rare? {
            guard case .rare(let rare) = extra else { return nil }
            return rare
        }

        /// The fields few records have.
        private final class Rare: Sendable {
            let prerequisites: [String]
            let crashes: Int
            let kills: Int
            let runsAlone: Bool
            let runsAloneAfterOthers: Bool
            let expiresAt: Date?
            let conditions: [String]
            let lane: String?
            /// An identifier not in canonical form.
            let textKey: String?
            /// A priority that does not fit 32 bits, or a due date that is NaN (from a store
            /// written by hand): kept exactly.
            let wideOrder: (order: RunOrder, due: Date?)?

            init(
                prerequisites: [String], crashes: Int, kills: Int, runsAlone: Bool, runsAloneAfterOthers: Bool,
                expiresAt: Date?, conditions: [String], lane: String?, textKey: String?, wideOrder: (order: RunOrder, due: Date?)?
            ) {
                self.prerequisites = prerequisites
                self.crashes = crashes
                self.kills = kills
                self.runsAlone = runsAlone
                self.runsAloneAfterOthers = runsAloneAfterOthers
                self.expiresAt = expiresAt
                self.conditions = conditions
                self.lane = lane
                self.textKey = textKey
                self.wideOrder = wideOrder
            }
        }

        init(
            id: String, order: RunOrder, due: Date?, prerequisites: [String], crashes: Int = 0, kills: Int = 0,
            runsAlone: Bool = false, runsAloneAfterOthers: Bool = false, expiresAt: Date? = nil, conditions: [String] = [], lane: String? = nil
        ) {
            self.init(
                key: RecordKey(id), order: order, due: due, prerequisites: prerequisites, crashes: crashes, kills: kills,
                runsAlone: runsAlone, runsAloneAfterOthers: runsAloneAfterOthers, expiresAt: expiresAt, conditions: conditions, lane: lane
            )
        }

        /// A record with none of the rare fields, when its key and order need none.
        init(key: RecordKey, order: RunOrder, due: Date?) {
            self.init(key: key, order: order, due: due, prerequisites: [])
        }

        private init(
            key: RecordKey, order: RunOrder, due: Date?, prerequisites: [String], crashes: Int = 0, kills: Int = 0,
            runsAlone: Bool = false, runsAloneAfterOthers: Bool = false, expiresAt: Date? = nil, conditions: [String] = [], lane: String? = nil
        ) {
            let textKey: String?
            switch key {
            case .uuid(let bits): (uuid, textKey) = (bits, nil)
            case .text(let text): (uuid, textKey) = (UUIDBits(high: 0, low: 0), text)
            }
            dueInterval = due?.timeIntervalSinceReferenceDate ?? .nan
            // An order that does not fit, and a due date that is NaN (from a store written by
            // hand), are kept exactly, out of line.
            var wideOrder: (order: RunOrder, due: Date?)?
            if let priority = Int8(exactly: order.priority), order.enqueueSequence >> Self.sequenceBits == 0 {
                packedOrder = UInt64(UInt8(bitPattern: priority) ^ 0x80) << Self.sequenceBits | order.enqueueSequence
            } else {
                packedOrder = 0
                wideOrder = (order, due)
            }
            if dueInterval.isNaN, due != nil { wideOrder = (order, due) }
            if !prerequisites.isEmpty || crashes != 0 || kills != 0 || runsAlone || runsAloneAfterOthers || expiresAt != nil
                || !conditions.isEmpty || lane != nil || textKey != nil || wideOrder != nil {
                extra = .rare(Rare(
                    prerequisites: prerequisites, crashes: crashes, kills: kills, runsAlone: runsAlone,
                    runsAloneAfterOthers: runsAloneAfterOthers, expiresAt: expiresAt, conditions: conditions, lane: lane,
                    textKey: textKey, wideOrder: wideOrder
                ))
            } else {
                extra = .compactPosition(-1)
            }
        }

        /// The record's identifier, held without an allocation (see `RecordKey`).
        var key: RecordKey { rare?.textKey.map(RecordKey.text) ?? .uuid(uuid) }
        var id: String { key.string }
        var order: RunOrder {
            if let wideOrder = rare?.wideOrder { return wideOrder.order }
            let priority = Int8(bitPattern: UInt8(truncatingIfNeeded: packedOrder >> Self.sequenceBits) ^ 0x80)
            return RunOrder(priority: Int(priority), enqueueSequence: packedOrder & (1 << Self.sequenceBits - 1))
        }
        var due: Date? {
            if let wideOrder = rare?.wideOrder { return wideOrder.due }
            return dueInterval.isNaN ? nil : Date(timeIntervalSinceReferenceDate: dueInterval)
        }
        /// Whether it has none of the rare fields: nothing but its turn decides when it runs.
        var isPlain: Bool { rare == nil }
        /// The identifier a report gives it.
        var operationID: PersistentOperationID { PersistentOperationID(key: key) }
        var prerequisites: [String] { rare?.prerequisites ?? [] }
        var crashes: Int { rare?.crashes ?? 0 }
        var kills: Int { rare?.kills ?? 0 }
        var runsAlone: Bool { rare?.runsAlone ?? false }
        /// Runs alone once nothing else is due (a suspect of kills), not before other work.
        var runsAloneAfterOthers: Bool { rare?.runsAloneAfterOthers ?? false }
        var expiresAt: Date? { rare?.expiresAt }
        var conditions: [String] { rare?.conditions ?? [] }
        /// The ordered lane of the record, if any.
        var lane: String? { rare?.lane }
    }

    /// Removes a record of a batch whose commit marker does not exist.
    private func discardUncommitted(_ record: OperationRecord, report: inout RestoreReport) {
        do {
            try store.discardUncommittedRecord(id: record.id)
            store.clearAttemptsInFlight(forRecord: record.id)
            report.discardedFromUncommittedBatches.append(PersistentOperationID(record: record.id))
        } catch {
            reportStoreError(record.id, "could not remove a record of an interrupted batch; it was not run: \(error)")
        }
    }

    /// Tracks one restored record, unless it crash-looped (moved to the failed area) or its
    /// type is not registered (reported); its payload is decoded, and the operation built,
    /// only when its first attempt starts.
    private func admitRestored(_ record: OperationRecord, suspect: CrashSuspect?, now: Date, into restored: inout [RestoredRecord], report: inout RestoreReport) {
        var suspect = suspect
        if suspect != nil, record.isBetweenPeriods, let due = record.dueDate, due > now {
            // A series saved between periods whose next window has not opened: no attempt of
            // that period has started (a period's first attempt does not rewrite the record, and
            // starts only once due — unless the clock was set back since), so the evidence is
            // the last period's attempt, whose end was saved before its marker was removed: the
            // launch ended in between (a crash, or a close, which waits for the save but not for
            // the removal). Taken for an interrupted attempt, it would keep the series out of
            // the idle ones until its next window (`allOperationsFinished()` waiting that long),
            // run that period alone and as a retry, and might blame it for a crash.
            store.clearSuspect(forRecord: record.id)
            store.clearAttemptsInFlight(forRecord: record.id)
            suspect = nil
        }
        if let suspect, suspect.crashes >= configuration.crashLoopLimit {
            let reason = "it crashed the process \(suspect.crashes) times while its attempt ran alone (crash-loop limit \(configuration.crashLoopLimit))"
            failRestored(record, suspect: suspect, reason: reason, what: "a crash-looping record", listedIn: \.movedToFailedAfterCrashes, holdsLane: true, report: &report)
            return
        }
        if let suspect, suspect.kills >= configuration.crashLoopLimit {
            let reason = "the process was killed \(suspect.kills) times in a row while its attempt ran alone and the app was active (crash-loop limit \(configuration.crashLoopLimit))"
            failRestored(record, suspect: suspect, reason: reason, what: "a record whose attempts get the process killed", listedIn: \.movedToFailedAfterCrashes, holdsLane: true, report: &report)
            return
        }
        if let expiresAt = record.expiresAt, expiresAt <= now {
            // Expired while the app was not running: it fails, and its dependents with it
            // (`settlePrerequisites` finds it in the failed area).
            let reason = String(describing: Self.expiredError(at: expiresAt))
            failRestored(record, suspect: suspect, reason: reason, lastError: reason, what: "an expired record", listedIn: \.expired, report: &report)
            return
        }
        // Its payload is decoded when the operation is built, not here: a restore reads only
        // what scheduling needs (see `operation(for:)` for a payload that no longer decodes).
        guard isRebuildable(record, checkingPayload: false, report: &report) else { return }
        trackRestored(record, suspect: suspect)
        restored.append(RestoredRecord(
            id: record.id, order: record.runOrder, due: record.dueDate,
            prerequisites: record.prerequisites, crashes: suspect?.crashes ?? 0, kills: suspect?.kills ?? 0,
            runsAlone: suspect?.runsAlone ?? false, runsAloneAfterOthers: suspect?.runsAloneAfterOthers ?? false,
            expiresAt: record.expiresAt, conditions: record.conditions, lane: record.lane
        ))
    }

    /// Moves a restored record that must not run to the failed area with `reason` (with the
    /// attempts its suspect file counted, which goes), and lists it in `list` of the report.
    /// `holdsLane`: it was its lane's current operation (its attempt was in flight), so it
    /// holds the lane when it holds on a failure.
    private func failRestored(
        _ record: OperationRecord, suspect: CrashSuspect?, reason: String, lastError: String? = nil, what: String,
        listedIn list: WritableKeyPath<RestoreReport, [PersistentOperationID]>, holdsLane: Bool = false, report: inout RestoreReport
    ) {
        let id = PersistentOperationID(record: record.id)
        do {
            // (A restore reads most records without their payloads: the failed area keeps the
            // whole record.)
            var failed = record.payload.isEmpty ? try store.readPending(id: record.id) : record
            failed.isHoldingLane = holdsLane && record.lane != nil && record.laneHoldsOnFailure
            failed.attemptsInFlight = suspect?.interruptedAttempts ?? 0
            if let lastError { failed.lastErrorDescription = lastError }
            _ = try store.moveToFailed(failed, reason: reason)
            if suspect != nil { store.clearSuspect(forRecord: record.id) }
            report[keyPath: list].append(id)
            hub.emit(.failed(id, reason: reason))
        } catch {
            reportStoreError(record.id, "could not move \(what) to the failed area; it was not run: \(error)")
        }
    }

    /// Whether a readable pending record's type is registered and (when `checkingPayload`)
    /// its payload decodes; records why not: an unknown type (left untouched) or a payload
    /// that does not decode (quarantined).
    func isRebuildable(_ record: OperationRecord, checkingPayload: Bool, report: inout RestoreReport) -> Bool {
        guard let type = registeredType(of: record, report: &report) else { return false }
        guard record.payloadVersion <= type.payloadVersion else {
            // Stored by a newer build of the app: left on disk as it is, like a record of a
            // newer format, until a build that reads it runs.
            report.newerFormatVersions.append(RestoreReport.Entry(
                name: StoreLayout.fileName(ofRecord: record.id),
                reason: "its payload was stored with payload version \(record.payloadVersion) of \"\(record.typeIdentifier)\"; this build knows versions up to \(type.payloadVersion)"
            ))
            return false
        }
        guard checkingPayload else { return true }
        do {
            try type.checkPayload(record.payload, record.payloadVersion)
        } catch {
            quarantineUndecodable(record, error: error, report: &report)
            return false
        }
        return true
    }

    /// The registered type of a record; an unknown one is reported and remembered.
    private func registeredType(of record: OperationRecord, report: inout RestoreReport) -> RegisteredType? {
        let id = PersistentOperationID(record: record.id)
        guard let type = state.withLock({ $0.registry[record.typeIdentifier] }) else {
            let unknown = UnknownTypeRecord(id: id, typeIdentifier: record.typeIdentifier)
            state.withLock { $0.unknownTypeRecords[record.id] = unknown }
            report.unknownTypes.append(unknown)
            hub.emit(.unknownType(id, typeIdentifier: record.typeIdentifier))
            return nil
        }
        state.withLock { _ = $0.unknownTypeRecords.removeValue(forKey: record.id) }
        return type
    }

    private func quarantineUndecodable(_ record: OperationRecord, error: any Error, report: inout RestoreReport) {
        let reason = "the payload does not decode as \"\(record.typeIdentifier)\" (payload version \(record.payloadVersion)): \(error)"
        do {
            let name = try store.quarantinePending(id: record.id, reason: reason)
            store.clearAttemptsInFlight(forRecord: record.id)
            report.quarantined.append(RestoreReport.Entry(name: name, reason: reason))
            hub.emit(.quarantined(entryName: name, reason: reason))
        } catch {
            reportStoreError(record.id, "could not quarantine a record whose payload does not decode; it was not run: \(error)")
        }
    }
}

extension PersistentOperationQueue {
    /// What becomes of a restored record because of its prerequisites.
    private enum RestoredFate {
        /// A prerequisite is in the failed area or was quarantined: the record fails too.
        case fails(cause: String, reason: String)
        /// Its prerequisites form a cycle: it could never start, and fails on its own
        /// account (naming no prerequisite, so that no chain of causes in the failed area loops).
        case inCycle(reason: String)
        /// A prerequisite was removed as replaced (cancelled): the record is removed too.
        case cancelled(cause: String)
        /// A prerequisite cannot run in this launch: the record stays on disk untouched.
        case held

        var precedence: Int {
            switch self {
            case .fails, .inCycle: return 3
            case .cancelled: return 2
            case .held: return 1
            }
        }
    }

    /// Settles the restored records whose prerequisites will never succeed in this launch (and,
    /// transitively, what waits for them), and returns the others, in order. Called by
    /// ``restore()`` with `graphLock` held, after every restored record is an entry.
    ///
    /// A prerequisite that is pending (restored now or tracked already) is waited for; one that
    /// is nowhere succeeded earlier (a cancelled one takes its dependents' records with it
    /// before its own, so it never looks the same). Records whose prerequisites form a cycle,
    /// or that wait for a periodic series (the queue never stores either, but a store written
    /// by hand or damaged may hold them), would wait forever: they fail.
    func settlePrerequisites(
        of restored: [RestoredRecord], unavailable: Set<String>, quarantined: Set<String>,
        cancelled: Set<String>, report: inout RestoreReport
    ) throws -> [RestoredRecord] {
        guard restored.contains(where: { !$0.prerequisites.isEmpty }) else { return restored }
        let failed = Set(try store.failedRecordIdentifiers())
        let restoredIDs = Set(restored.map(\.id))
        // A periodic series never finishes (the queue refuses it as a prerequisite, but a store
        // written by hand may name one): what waits for it could never start.
        let periodic = state.withLock { state in
            Set(restored.flatMap(\.prerequisites).filter { state.entries[$0]?.record.isPeriodic == true })
        }
        var dependents: [String: [String]] = [:]
        var fates: [String: RestoredFate] = [:]
        var work: [String] = []
        for record in restored where !record.prerequisites.isEmpty {
            for prerequisite in record.prerequisites where restoredIDs.contains(prerequisite) {
                dependents[prerequisite, default: []].append(record.id)
            }
            let fate: RestoredFate?
            if let cause = record.prerequisites.first(where: failed.contains) {
                fate = .fails(cause: cause, reason: "prerequisite \(cause) failed for good")
            } else if let cause = record.prerequisites.first(where: quarantined.contains) {
                fate = .fails(cause: cause, reason: "prerequisite \(cause) could not be read and was quarantined")
            } else if let cause = record.prerequisites.first(where: periodic.contains) {
                fate = .fails(cause: cause, reason: "prerequisite \(cause) is periodic: a series never finishes, so it could never start")
            } else if let cause = record.prerequisites.first(where: cancelled.contains) {
                fate = .cancelled(cause: cause)
            } else if record.prerequisites.contains(where: unavailable.contains) {
                fate = .held
            } else {
                fate = nil
            }
            if let fate {
                fates[record.id] = fate
                work.append(record.id)
            }
        }
        for (id, through) in Self.prerequisiteCycles(of: restored, among: restoredIDs) where fates[id]?.precedence != 3 {
            fates[id] = .inCycle(reason: "its prerequisites form a cycle (through \(through)), so it could never start")
            work.append(id)
        }
        var index = 0
        while index < work.count {
            let id = work[index]
            index += 1
            let inherited: RestoredFate
            switch fates[id]! {
            case .fails, .inCycle: inherited = .fails(cause: id, reason: "prerequisite \(id) failed for good")
            case .cancelled: inherited = .cancelled(cause: id)
            case .held: inherited = .held
            }
            for dependent in dependents[id] ?? [] where inherited.precedence > (fates[dependent]?.precedence ?? 0) {
                fates[dependent] = inherited
                work.append(dependent)
            }
        }
        guard !fates.isEmpty else { return restored }

        // Failures in the order the fates spread (a prerequisite's record before its
        // dependents'), cancellations deepest first.
        var cancellations: [(id: String, cause: String)] = []
        for id in work {
            let operationID = PersistentOperationID(record: id)
            switch fates[id]! {
            case .fails(let cause, let reason):
                guard state.withLock({ $0.entries[id] != nil }) else { continue }
                do {
                    var record = try store.readPending(id: id)
                    record.failedPrerequisite = cause
                    record.lastErrorDescription = reason
                    _ = try store.moveToFailed(record, reason: reason)
                    report.failedWithTheirPrerequisites.append(operationID)
                    hub.emit(.abandoned(operationID, prerequisite: PersistentOperationID(record: cause)))
                    hub.emit(.failed(operationID, reason: reason))
                } catch {
                    reportStoreError(id, "could not move a record whose prerequisite failed to the failed area; it was not run: \(error)")
                }
                forget(id)
            case .inCycle(let reason):
                guard state.withLock({ $0.entries[id] != nil }) else { continue }
                do {
                    var record = try store.readPending(id: id)
                    record.lastErrorDescription = reason
                    _ = try store.moveToFailed(record, reason: reason)
                    report.failedWithTheirPrerequisites.append(operationID)
                    hub.emit(.failed(operationID, reason: reason))
                } catch {
                    reportStoreError(id, "could not move a record whose prerequisites form a cycle to the failed area; it was not run: \(error)")
                }
                forget(id)
            case .cancelled(let cause):
                cancellations.append((id, cause))
            case .held:
                guard state.withLock({ state in
                    guard let entry = state.entries.removeValue(forKey: id) else { return false }
                    left(entry.record, ended: false, in: &state)
                    return true
                }) else { continue }
                // Left on disk as it is, batch included: it must not look uncommitted later.
                report.heldForUnavailablePrerequisites.append(operationID)
            }
        }
        var removed = Set<String>()
        for (id, cause) in cancellations.reversed() where removed.insert(id).inserted {
            let operationID = PersistentOperationID(record: id)
            guard case .cancelled = fates[id] else { continue }
            do {
                try store.removePending(id: id, synchronizes: true)
                hub.emit(.abandoned(operationID, prerequisite: PersistentOperationID(record: cause)))
                hub.emit(.cancelled(operationID))
            } catch {
                reportStoreError(id, "could not remove a record whose prerequisite was replaced; it was not run: \(error)")
            }
            forget(id)
        }
        return restored.filter { fates[$0.id] == nil }
    }

    /// The records among `restored` that lie on a cycle of prerequisites (or between two),
    /// each with one of its prerequisites on it. Peels from both ends, O(records + edges):
    /// what is left once every record without a prerequisite left has gone, and then every
    /// one without a dependent left, lies on a cycle. `among`: the identifiers of `restored`.
    static func prerequisiteCycles(of restored: [RestoredRecord], among restoredIDs: Set<String>) -> [String: String] {
        var prerequisites: [String: Set<String>] = [:]
        var dependents: [String: Set<String>] = [:]
        for record in restored where !record.prerequisites.isEmpty {
            let among = Set(record.prerequisites).intersection(restoredIDs)
            guard !among.isEmpty else { continue }
            prerequisites[record.id] = among
            for prerequisite in among { dependents[prerequisite, default: []].insert(record.id) }
        }
        guard !prerequisites.isEmpty else { return [:] }
        // Records that can start once their prerequisites have run.
        var waiting = prerequisites.mapValues(\.count)
        var free = restored.map(\.id).filter { waiting[$0] == nil }
        while let id = free.popLast() {
            for dependent in dependents[id] ?? [] {
                waiting[dependent]! -= 1
                if waiting[dependent] == 0 {
                    waiting.removeValue(forKey: dependent)
                    free.append(dependent)
                }
            }
        }
        // Of the others, those that merely wait behind a cycle.
        var awaited = Dictionary(uniqueKeysWithValues: waiting.keys.map { id in
            (id, dependents[id, default: []].filter { waiting[$0] != nil }.count)
        })
        var behind = awaited.filter { $0.value == 0 }.map(\.key)
        while let id = behind.popLast() {
            awaited.removeValue(forKey: id)
            for prerequisite in prerequisites[id] ?? [] where awaited[prerequisite] != nil {
                awaited[prerequisite]! -= 1
                if awaited[prerequisite] == 0 { behind.append(prerequisite) }
            }
        }
        var cycles: [String: String] = [:]
        for id in awaited.keys {
            cycles[id] = prerequisites[id]?.first { awaited[$0] != nil }
        }
        return cycles
    }
}
