import Foundation

// Expiration dates: a stored operation whose record has an expiration date and that has not
// started by then ends failed ("expired"), wherever it waits — in the timer, for a slot, for its
// prerequisites. One timer entry per expiring record (in the queue's `DueTimer`), armed once the
// entry is scheduled and cancelled when it is forgotten; the first attempt's slot checks the
// date too, so a slot that starts late never runs an expired operation. Once started, a
// `RetryingOperation` enforces the date itself (its `expirationDate` is the record's): no retry
// after it. `restore()` fails the records that expired while the app was not running.

extension PersistentOperationQueue {
    /// The failure of an operation that expired at `date`.
    static func expiredError(at date: Date) -> RetryingOperationError {
        RetryingOperationError(code: .expired, message: "the operation expired at \(date) before it succeeded")
    }

    /// Arms the expiration timer of a tracked entry whose record expires. Also for an entry whose
    /// first attempt already started (its slot came at once): a retry of it that waits for its
    /// run conditions at the date is ended by the timer too.
    func armExpiry(of id: String, at date: Date) {
        let token = timer.schedule(at: date) { [weak self] in self?.expire(id) }
        let isStale = state.withLock { state -> Bool in
            guard var entry = state.entries[id], entry.ending == nil else { return true }
            entry.expiryTimer = token
            state.entries[id] = entry
            return false
        }
        if isStale { token.cancel() }
    }

    /// The expiration timer of `id` fired: an operation that has not started finishes failed.
    func expire(_ id: String) {
        let now = timer.now
        enum Action {
            case finishUnbuilt(RetryingOperationError, token: DueTimer.Token?, slot: AttemptSlot?)
            case finish(Operation, RetryingOperationError, token: DueTimer.Token?, slot: AttemptSlot?)
            case failWait(RetryingOperation, RetryingOperationError, slot: AttemptSlot?)
        }
        let action = state.withLock { state -> Action? in
            guard var entry = state.entries[id], entry.ending == nil,
                  let date = entry.record.expiresAt, date <= now else { return nil }
            defer { state.entries[id] = entry }
            if entry.hasStarted {
                // A due retry not admitted yet — waiting for a slot or for its run conditions —
                // fails now, without an attempt. (A retry waiting on its timer is ended by the
                // operation's own expiration date; a running attempt may finish.)
                guard entry.pendingAdmission != nil, let retrying = entry.operation as? RetryingOperation else { return nil }
                var slot: AttemptSlot?
                switch entry.phase {
                case .queued(let queued): slot = queued
                case .waitingForConditions: unpark(entry, in: &state)
                case .ready: break   // `ready` skips an entry no longer ready
                default: return nil
                }
                entry.parkedUnder = nil
                entry.pendingAdmission = nil
                entry.phase = .running(nil)
                return .failWait(retrying, Self.expiredError(at: date), slot: slot)
            }
            let error = Self.expiredError(at: date)
            entry.hasStarted = true
            entry.expiry = error
            entry.expiryTimer = nil
            var token: DueTimer.Token?
            var slot: AttemptSlot?
            switch entry.phase {
            case .scheduled(let scheduled): token = scheduled
            case .queued(let queued): slot = queued
            case .ready, .blocked, .running, .waitingToRetry, .waitingForConditions:
                break   // `ready` skips an entry no longer ready; `forget` unparks it
            }
            entry.phase = .running(nil)
            guard let operation = entry.holdLiveOperation() else { return .finishUnbuilt(error, token: token, slot: slot) }
            return .finish(operation, error, token: token, slot: slot)
        }
        switch action {
        case nil:
            return
        case .finishUnbuilt(let error, let token, let slot):
            log(.info, "\(id): expired before it started") { ["operation_id": id, "outcome": "failed"] }
            token?.cancel()
            slot?.cancel()
            operationFinished(id, outcome: .failed(error))
        case .finish(let operation, let error, let token, let slot):
            log(.info, "\(id): expired before it started") { ["operation_id": id, "outcome": "failed"] }
            token?.cancel()
            slot?.cancel()
            finishWithoutAttempt(operation, failingWith: error)
        case .failWait(let operation, let error, let slot):
            log(.info, "\(id): expired while its due retry waited for a slot or its run conditions") { ["operation_id": id, "outcome": "failed"] }
            slot?.cancel()
            operation.failWait(with: error)
        }
    }

    /// Starts a live operation only so that it finishes, failed with `error`, without an
    /// attempt: a `RetryingOperation` fails with it; any other operation is cancelled, and its
    /// end is taken as that failure (the entry's `expiry`).
    func finishWithoutAttempt(_ operation: Operation, failingWith error: any Error) {
        if let retrying = operation as? RetryingOperation {
            retrying.failWhenStarted(with: error)
        } else {
            operation.cancel()
        }
        DispatchQueue.global().async { operation.start() }
    }

    /// Called by a first attempt's slot as it starts, outside the lock: whether the record
    /// has expired, in which case the entry is marked and the caller finishes it instead of
    /// starting an attempt.
    func expiryBeforeFirstAttempt(of id: String, expiresAt: Date) -> RetryingOperationError? {
        guard timer.now >= expiresAt else { return nil }
        let error = Self.expiredError(at: expiresAt)
        state.withLock { state in
            state.entries[id]?.expiry = error
            state.entries[id]?.expiryTimer = nil
        }
        return error
    }
}
