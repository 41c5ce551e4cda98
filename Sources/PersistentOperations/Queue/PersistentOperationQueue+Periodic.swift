import Foundation
import RetryingOperation

// Periodic operations: a record with a repeat interval is not removed when a period ends
// (succeeded, or failed for good) but rewritten for the next period — counts reset, the next
// target a whole number of intervals after the current one and after now, `notBefore` the start
// of its window — and its entry stays, without an operation, scheduled in the timer like a
// restored one; the next period builds a new operation from the payload. Between periods —
// once the period's end is saved — the entry sits in `State.seriesBetweenPeriods`, so waiting
// for the queue to finish does not wait for it. Cancellation, expiry, crash-loop protection and quarantine end a series the way they
// end any operation.

extension PersistentOperationQueue {
    /// Throws ``PersistenceError/Code/invalidOptions`` or
    /// ``PersistenceError/Code/invalidDependency`` when `schedule` cannot be used for `operation`.
    func checkRepeatSchedule(_ schedule: RepeatSchedule, of operation: Operation) throws {
        if let problem = schedule.problem {
            throw PersistenceError(.invalidOptions, "\(Self.describe(operation)) cannot repeat: \(problem).")
        }
        if !operation.dependencies.isEmpty {
            throw PersistenceError(
                .invalidDependency,
                "\(Self.describe(operation)) is periodic and has dependencies: a series cannot wait for prerequisites. Remove them, or add the work once (without repeating) after them."
            )
        }
    }

    /// The target of the period after the one that targeted `target`, ending at `now`: the first
    /// of `target + k × interval` (k ≥ 1) whose window (from `flex` before it) opens after `now`.
    /// Missed periods are skipped, not run — and so is a period whose window was already open
    /// when this one ended: the run that just ended served it.
    static func nextPeriodTarget(after target: Date, interval: TimeInterval, flex: TimeInterval = 0, now: Date) -> Date {
        let elapsed = now.timeIntervalSince(target) + flex
        var periods = max(1, (elapsed / interval).rounded(.down) + 1)
        var next = target.addingTimeInterval(periods * interval)
        // Floating-point rounding may land exactly on (or just before) the bound.
        while next.addingTimeInterval(-flex) <= now {
            periods += 1
            next = target.addingTimeInterval(periods * interval)
        }
        return next
    }

    /// A period of periodic `id` ended with `outcome`: rewrites its record for the next period
    /// and schedules it. Returns `false` when the series ends instead (cancelled, cancel
    /// requested, expired): the caller then finishes it as any operation.
    func endPeriod(_ id: String, outcome: RetryingOperation.Outcome) -> Bool {
        let failure: String?
        switch outcome {
        case .succeeded:
            failure = nil
        case .cancelled:
            return false
        case .failed(let error):
            // The operation's own expiration date ends the series, as the record's does.
            if let retrying = error as? RetryingOperationError, retrying.code == .expired { return false }
            failure = String(describing: error)
        }
        let now = timer.now
        struct Ended {
            var record: OperationRecord
            var detached: Detached
            var released: Operation?
        }
        let ended = state.withLock { state -> Ended? in
            guard var entry = state.entries[id], entry.ending == nil, !entry.isCancelRequested,
                  let interval = entry.record.repeatInterval else { return nil }
            var record = entry.record
            let target = record.periodTarget ?? record.notBefore ?? record.enqueuedAt
            let next = Self.nextPeriodTarget(after: target, interval: interval, flex: record.repeatFlex, now: now)
            record.periodTarget = next
            record.notBefore = next.addingTimeInterval(-record.repeatFlex)
            record.completedPeriods += 1
            record.numberOfRetries = 0
            record.numberOfAttempts = 0
            record.nextAttemptAt = nil
            record.attemptsInFlight = 0
            record.lastErrorDescription = failure
            var ended = Ended(record: record, detached: detach(entry, in: &state))
            if let key = entry.operationKey, state.idsByOperation[key] == id {
                state.idsByOperation.removeValue(forKey: key)
            }
            entry.operationKey = nil
            if let operation = entry.liveOperation {
                ended.released = operation
            }
            entry.record = record
            entry.operation = nil
            entry.parkedOperation = nil
            entry.phase = .scheduled(nil)
            // Until its record is saved: a cancel meanwhile only marks it (its record must not be
            // removed before this write, which would bring it back), and is carried out below.
            entry.hasStarted = true
            entry.attemptsInFlight = 0
            entry.crashes = 0
            entry.kills = 0
            entry.hasSuspectFile = false
            entry.pendingAdmission = nil
            entry.parkedUnder = nil
            state.entries[id] = entry
            return ended
        }
        guard let ended else { return false }
        do {
            try store.update(try withStoredPayload(ended.record))
        } catch {
            reportStoreError(id, "could not save the end of a period; after a crash the period runs again: \(error)")
        }
        store.clearAttemptsInFlight(forRecord: id)
        // Saved: between periods now — idle, so that waiting for the queue does not wait for it —
        // unless it was cancelled meanwhile.
        let (isCancelRequested, waiters) = state.withLock { state -> (Bool, [EmptyWaiter]) in
            guard var entry = state.entries[id] else { return (false, []) }
            entry.hasStarted = false
            state.entries[id] = entry
            if entry.isCancelRequested { return (true, []) }
            state.seriesBetweenPeriods.insert(id)
            return (false, takeEmptyWaitersIfIdle(in: &state))
        }
        let nextStart = ended.record.notBefore ?? now
        hub.emit(.periodEnded(PersistentOperationID(record: id), failure: failure, nextPeriodAt: nextStart))
        finishDetaching(id, ended.detached)
        if isCancelRequested {
            // Cancelled (or replaced) while the record was being saved: the series ends now.
            operationFinished(id, outcome: .cancelled)
        } else {
            if failure != nil {
                log(.warning, "\(id): a period failed for good (\(failure ?? "")); the series goes on, next period from \(nextStart)") {
                    ["operation_id": id, "outcome": "failed", "error": failure ?? ""]
                }
            }
            schedule(id, due: nextStart)
        }
        signalProgress(resuming: waiters)
        // The finished operation is released here, outside every lock: a deinit is user code.
        _ = ended.released
        return true
    }
}
