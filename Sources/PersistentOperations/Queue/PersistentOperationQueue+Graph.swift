import Foundation

// Graph: dependencies between stored operations.
//
// An operation added with `b.addDependency(a)` for an `a` of this queue is stored with `a`'s
// record identifier among its prerequisites. While any prerequisite is unfinished the entry is
// `blocked`: it sits in no timer, heap or slot, only in `State.dependents[a]`. When `a` succeeds,
// `forget` takes `a`'s dependents in the same lock that removes `a`, counts each down, and
// schedules those with nothing left to wait for: O(1) per edge, no rescans.
//
// When `a` fails for good or is cancelled, its dependents (and theirs) are abandoned: under
// `graphLock`, a failure moves `a`'s record to the failed area first and then each dependent's
// (naming `a` as its failed prerequisite); a cancellation removes the dependents' records first,
// each synced, and then `a`'s. Either way a dependent never outlives its prerequisite on disk in
// a state that would let it run: after any crash, `restore()` reads an absent prerequisite as
// one that succeeded and a failed one as a reason to fail.
//
// Foundation's own dependency bookkeeping stays as the user set it (`dependencies` still lists
// the prerequisites). Its `Operation` keeps an unretained reference from a prerequisite to each
// live dependent and touches it when the prerequisite finishes, so a live dependent is held by
// its prerequisite's entry (`heldDependents`) until the prerequisite has finished.

/// A live operation the queue tracked that has finished, and how; kept (with the operation
/// held weakly) so that an operation added later with it as a dependency knows the outcome.
struct FinishedOperation: @unchecked Sendable {
    // @unchecked: `operation` is only compared by identity, never used, and the struct lives in
    // the queue's locked state.
    weak var operation: Operation?
    var id: String
    var ending: PersistentOperationQueue.Entry.Ending
}

extension PersistentOperationQueue {
    /// The prerequisites of an operation about to be stored.
    struct ResolvedPrerequisites {
        /// Record identifiers to store as prerequisites: unfinished operations of this queue
        /// and members of the same batch.
        var ids: [String] = []
        /// Of those, the ones whose live operation is among the operation's Foundation
        /// `dependencies` (the entry of each holds the operation until it has finished).
        var liveIDs: [String] = []
    }

    /// Resolves `operation.dependencies` to prerequisite record identifiers. Call with
    /// `graphLock` held, and keep it until the operation is linked.
    ///
    /// `batch` maps the other operations of the same ``addOperations(_:)`` call to the
    /// identifiers they will be stored under. A dependency that already succeeded in this
    /// queue is left out (nothing to wait for).
    ///
    /// - Throws: ``PersistenceError/Code/invalidDependency`` for a dependency on the operation
    ///   itself or on an operation this queue does not store; ``PersistenceError/Code/prerequisiteFailed``
    ///   for one that already failed for good or was cancelled.
    func resolvePrerequisites(of operation: Operation, batch: [ObjectIdentifier: String] = [:]) throws -> ResolvedPrerequisites {
        var resolved = ResolvedPrerequisites()
        for dependency in operation.dependencies {
            if dependency === operation {
                throw PersistenceError(.invalidDependency, "\(Self.describe(operation)) depends on itself; remove that dependency.")
            }
            let key = ObjectIdentifier(dependency)
            if let id = batch[key] {
                resolved.ids.append(id)
                resolved.liveIDs.append(id)
                continue
            }
            enum Found { case pending(String), ended(String, Entry.Ending), periodic(String), unknown }
            let found = state.withLock { state -> Found in
                if let id = state.idsByOperation[key], let entry = state.entries[id], entry.liveOperation === dependency {
                    if entry.record.isPeriodic { return .periodic(id) }
                    switch entry.ending {
                    case nil, .succeeded?: return .pending(id)
                    case .failed?, .cancelled?: return .ended(id, entry.ending!)
                    }
                }
                if let finished = state.finishedOperations[key], finished.operation === dependency {
                    return .ended(finished.id, finished.ending)
                }
                return .unknown
            }
            switch found {
            case .pending(let id):
                resolved.ids.append(id)
                resolved.liveIDs.append(id)
            case .ended(_, .succeeded):
                continue
            case .ended(let id, let ending):
                throw PersistenceError(
                    .prerequisiteFailed,
                    "\(Self.describe(operation)) depends on operation \(id), which \(ending == .cancelled ? "was cancelled" : "failed for good"); it was not stored and will not run. Re-queue the prerequisite (retryFailedOperation(withID:)) and add this operation again, or remove the dependency."
                )
            case .periodic(let id):
                throw PersistenceError(
                    .invalidDependency,
                    "\(Self.describe(operation)) depends on operation \(id), which is periodic: a series never finishes, so nothing can wait for it. Remove the dependency."
                )
            case .unknown:
                throw PersistenceError(
                    .invalidDependency,
                    "\(Self.describe(operation)) depends on \(Self.describe(dependency)), which this PersistentOperationQueue does not store (a plain Operation, another queue's operation, or one not added yet). Add the prerequisite to this queue first, or add both with addOperations(_:)."
                )
            }
        }
        return resolved
    }

    static func describe(_ operation: Operation) -> String {
        operation.name.map { "Operation \"\($0)\"" } ?? "\(type(of: operation))"
    }

    /// Under the state lock: registers entry `id` with each unfinished prerequisite and counts
    /// them. Returns a prerequisite that has already failed or been cancelled instead, without
    /// registering anything: the entry must then be abandoned.
    ///
    /// A prerequisite the queue does not track is taken as succeeded: the callers have
    /// resolved the others (an add checks its live dependencies, a restore or re-queue checks
    /// the failed area first).
    func link(_ id: String, to prerequisites: [String], holdingFrom liveIDs: [String] = [], in state: inout State) -> (id: String, ending: Entry.Ending)? {
        guard !prerequisites.isEmpty else { return nil }
        for prerequisite in prerequisites {
            if let ending = state.entries[prerequisite]?.ending, ending != .succeeded {
                return (prerequisite, ending)
            }
        }
        var remaining = 0
        var seen = Set<String>()
        for prerequisite in prerequisites where seen.insert(prerequisite).inserted && state.entries[prerequisite] != nil {
            state.dependents[prerequisite, default: []].append(id)
            remaining += 1
        }
        if let operation = state.entries[id]?.operation {
            for prerequisite in liveIDs where state.entries[prerequisite] != nil {
                state.entries[prerequisite]!.heldDependents.append(operation)
            }
        }
        state.entries[id]?.remainingPrerequisites = remaining
        if remaining > 0 { state.entries[id]?.phase = .blocked }
        return nil
    }

    /// The prerequisites of `id` that are still unfinished, for events and queries.
    func unfinishedPrerequisites(of record: OperationRecord, in state: State) -> [PersistentOperationID] {
        record.prerequisites.filter { state.entries[$0] != nil }.map(PersistentOperationID.init(record:))
    }

    /// Schedules a newly linked entry (and put in its lane), or reports it blocked or waiting
    /// for its turn (`laneAhead`: the members of its lane before it), or abandons it when a
    /// prerequisite has already ended (`ended`, from ``link(_:to:holdingFrom:in:)``).
    func scheduleLinked(_ id: String, due: Date?, ended: (id: String, ending: Entry.Ending)?, laneAhead: Int? = nil) {
        if let ended {
            abandon([id], because: ended.id, ending: ended.ending)
            return
        }
        enum Waits { case prerequisites([PersistentOperationID]), lane(String) }
        let waits = state.withLock { state -> Waits? in
            // (The phase first: an entry that waits its turn is held compact, and is not made
            // whole to be looked at.)
            guard case .blocked? = state.entries.phase(of: id), let entry = state.entries[id] else { return nil }
            if entry.remainingPrerequisites == 0, entry.waitsForLane, let lane = entry.record.lane { return .lane(lane) }
            return .prerequisites(unfinishedPrerequisites(of: entry.record, in: state))
        }
        switch waits {
        case .prerequisites(let blockedOn)?:
            hub.emit(.blocked(PersistentOperationID(record: id), prerequisites: blockedOn))
        case .lane(let lane)?:
            hub.emit(.waitingForLane(PersistentOperationID(record: id), lane: lane, ahead: laneAhead ?? 0))
        case nil:
            schedule(id, due: due)
        }
    }

    /// Under the state lock: marks how `id` is ending, and returns the entries blocked on it.
    func beginEnding(_ id: String, as ending: Entry.Ending, in state: inout State) -> [String] {
        state.entries[id]?.ending = ending
        return ending == .succeeded ? [] : (state.dependents.removeValue(forKey: id) ?? [])
    }

    /// Ends `roots`, and every entry that waits for them, because `prerequisite` failed for
    /// good (`ending == .failed`) or was cancelled. Call with `graphLock` held (re-queueing
    /// failed records takes it too, so none is re-queued halfway), after the prerequisite's
    /// own end was marked.
    ///
    /// A failure moves each record to the failed area naming the prerequisite that failed it,
    /// after that prerequisite's own record (so a crash in between leaves a pending dependent
    /// whose prerequisite is in the failed area: the next restore fails it). A cancellation
    /// removes the records deepest first, each removal synced, before the caller removes the
    /// prerequisite's (so a dependent never outlives a cancelled prerequisite on disk).
    func abandon(_ roots: [String], because prerequisite: String, ending: Entry.Ending, reason: String? = nil) {
        struct Abandoned {
            var id: String
            var record: OperationRecord
            var operation: Operation?
            var cause: String
            /// A cancel or an expiration is already finishing the operation: it must not be
            /// started again, only its record settled.
            var isAlreadyFinishing = false
        }
        let abandoned = state.withLock { state -> [Abandoned] in
            var order: [Abandoned] = []
            var queue = roots.map { ($0, prerequisite) }
            var index = 0
            while index < queue.count {
                let (id, cause) = queue[index]
                index += 1
                guard var entry = state.entries[id], entry.ending == nil else { continue }
                let isAlreadyFinishing = entry.hasStarted && entry.liveOperation != nil && {
                    if case .running(nil) = entry.phase { return true }
                    return false
                }()
                entry.ending = ending
                entry.isRecordSettled = true
                entry.hasStarted = true
                entry.phase = .running(nil)
                let operation = entry.holdLiveOperation()
                state.entries[id] = entry
                order.append(Abandoned(id: id, record: entry.record, operation: operation, cause: cause, isAlreadyFinishing: isAlreadyFinishing))
                for dependent in state.dependents.removeValue(forKey: id) ?? [] {
                    queue.append((dependent, id))
                }
            }
            return order
        }
        guard !abandoned.isEmpty else { return }
        let records = ending == .cancelled ? abandoned.reversed() : abandoned
        for item in records {
            let operationID = PersistentOperationID(record: item.id)
            hub.emit(.abandoned(operationID, prerequisite: PersistentOperationID(record: item.cause)))
            do {
                if ending == .cancelled {
                    try store.removePending(id: item.id, synchronizes: true)
                    hub.emit(.cancelled(operationID))
                } else {
                    var failed = item.record
                    let because = item.cause == prerequisite ? (reason.map { ": \($0)" } ?? "") : ""
                    let text = "prerequisite \(item.cause) failed for good\(because)"
                    failed.failedPrerequisite = item.cause
                    failed.lastErrorDescription = text
                    try moveTrackedRecordToFailed(failed, reason: text)
                    hub.emit(.failed(operationID, reason: text))
                }
            } catch {
                reportStoreError(item.id, "could not save that the operation ended with its prerequisite \(item.cause): \(error)")
            }
        }
        for item in abandoned where !item.isAlreadyFinishing {
            guard let operation = item.operation else {
                forget(item.id)
                continue
            }
            // The operation finishes without running, and its finish makes the queue forget it
            // (its record is settled): after Foundation's own bookkeeping for it is done.
            if ending == .failed, let retrying = operation as? RetryingOperation {
                retrying.failWhenStarted(with: PersistenceError(
                    .prerequisiteFailed, "Prerequisite \(item.cause) failed for good, so this operation never ran."
                ))
            } else {
                operation.cancel()
            }
            DispatchQueue.global().async { operation.start() }
        }
    }
}
