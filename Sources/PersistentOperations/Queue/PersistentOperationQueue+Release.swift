import Foundation

// Parking: an operation added in this process that has to wait is held weakly.
//
// A restored backlog holds records' fields, not operations: each is built from its payload when
// due. An added operation used to stay a live object until it ran, about a kilobyte each, so a
// process that added a million held gigabytes. Now an added `RetryingOperation` that waits once
// scheduled (for a later date, for prerequisites, for run conditions, or in `State.ready`
// behind a full slot window) is *parked*: its entry holds it weakly (`Entry.parkedOperation`).
//
// - While the app holds the object, it is the one that runs: `operation(for:)`, a slot's start,
//   a cancel and an expiry take the parked object and hold it again (`Entry.holdLiveOperation`).
// - Once nothing else holds it, it is gone, and it is built again from its record when due,
//   exactly as a restored one is.
// - A cancel of a parked object (the app holds it to call `cancel()`) holds it again at once
//   (`operationWasCancelled`): the cancelled object is the one its slot starts, and it finishes
//   cancelled, even if the app lets go of it right after the call.
//
// - The entry of a parked operation that is gone keeps nothing of it: each add looks at a few
//   whole entries (twice as many as it adds, from where the last add stopped) and drops the
//   operation's key of those whose parked operation no longer exists, so that an entry left
//   with nothing but its record is held compact (64 bytes), as a restored one is.
//
// Never parked, because they carry what a payload cannot rebuild or a cancel the queue would not
// see: operations added with `EnqueueOptions.keepsOperationAlive`, those with a completion block
// or dependencies (a dependency is held by its dependent), plain `Operation`s (their cancel
// before the start is not observable), and operations that already started or were cancelled.
// Parking happens once, right after the add schedules it; an operation that waits later (a
// retry) is held, as it has started.

extension PersistentOperationQueue {
    /// Whether an added operation may be parked while it waits.
    static func mayPark(_ operation: Operation) -> Bool {
        operation is RetryingOperation && operation.completionBlock == nil && operation.dependencies.isEmpty && !operation.isCancelled
    }

    /// Parks the operations of `ids` that wait now: scheduled in the timer, blocked, waiting
    /// for conditions, or ready behind a full window, and not started, cancelled or ending.
    func parkIfWaiting(_ ids: [String]) {
        state.withLock { state in
            for id in ids {
                state.entries.withEntry(id) { Self.parkIfWaiting(&$0) }
            }
        }
    }

    /// Parks the operation of `entry` if it waits now, as `parkIfWaiting(_:)` does for the
    /// entries of ids.
    static func parkIfWaiting(_ entry: inout Entry) {
        guard let operation = entry.operation, !entry.hasStarted, !entry.isCancelRequested, entry.ending == nil else { return }
        switch entry.phase {
        case .scheduled(.some), .ready, .blocked, .waitingForConditions:
            entry.parkedOperation = operation
            entry.operation = nil
        case .scheduled(nil), .queued, .running, .waitingToRetry:
            return
        }
    }

    /// Under the lock: looks at up to `budget` whole entries, from where the last sweep
    /// stopped, and lets go of the key of each parked operation that no longer exists (the
    /// app let go of it): an entry left with nothing but its record is then held compact.
    func sweepReleasedOperations(budget: Int, in state: inout State) {
        var released: [(key: ObjectIdentifier, id: String)] = []
        state.releaseSweepPosition = state.entries.sweepWholeEntries(from: state.releaseSweepPosition, budget: budget) { entry in
            entry.operation == nil && entry.operationKey != nil && entry.parkedOperation == nil
        } release: { entry, id in
            if let key = entry.operationKey { released.append((key, id)) }
            entry.operationKey = nil
        }
        for (key, id) in released where state.idsByOperation[key] == id {
            state.idsByOperation[key] = nil
        }
    }

    /// The app cancelled `operation` (``RetryingOperation/cancel()``): if it was parked, the
    /// queue holds it again, so that it is the object that finishes cancelled.
    func operationWasCancelled(_ id: String, _ operation: Operation) {
        state.withLock { state in
            guard var entry = state.entries[id], entry.operation == nil, entry.parkedOperation === operation else { return }
            _ = entry.holdLiveOperation()
            state.entries[id] = entry
        }
    }
}
