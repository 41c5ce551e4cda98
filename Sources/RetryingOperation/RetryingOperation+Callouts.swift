import Foundation

// How `RetryingOperation` runs its jobs: every transition of the state machine, every call
// into user code and every KVO announcement happens in a `Callout`, performed one at a time
// and in order by the operation's `CalloutQueue` (kept in the locked state, see
// `MachineState.callouts`).

extension RetryingOperation {
    /// A job of the operation's callout queue: what happened, as a value, so that queuing it
    /// allocates no closure context.
    enum Callout: @unchecked Sendable {
        // @unchecked: a payload (an attempt's error or retry helpers) is given up by the
        // thread that submits the callout and touched only by the thread that performs it.

        /// `start()` was called: run the first attempt.
        case beginFirstAttempt
        /// `baseOperationEnded…` was called for the running attempt.
        case processAttemptEnd(AttemptEnd)
        /// `cancel()` was called.
        case processCancellation
        /// The timer of wait `generation` fired.
        case timerFired(generation: UInt64)
        /// The driver admitted the due retry, or it reached where the operation's attempts run.
        case beginAdmittedRetry
        /// `retryNow()` (`nil`), `retry(in:)` or `retry(withHelpers:)` was called.
        case applyRequestedRetry([RetryHelper]?)
        /// The timeout of asynchronous attempt `attempt` passed.
        case attemptTimedOut(attempt: Int)
        /// The driver stops asynchronous attempt `attempt` (a bounded run ended).
        case attemptStopped(attempt: Int)
        /// The expiration date passed during wait `generation`.
        case expirationReached(generation: UInt64)
        /// The driver ends a wait (a due retry it has not admitted yet, included) with a failure.
        case failWait(any Error)
    }

    /// Performs `callout` now if no other callout is running, otherwise queues it behind the
    /// running one.
    func submit(_ callout: Callout) {
        let runsNow = machine.withLock { $0.callouts.submit(callout) }
        if runsNow {
            performCallouts(startingWith: callout)
        }
    }

    /// Queues `callout` in the order of submission, like ``submit(_:)``, but never performs
    /// anything on the calling thread: if the queue was idle, a background thread drains it.
    ///
    /// Used for requests from outside the operation (`retryNow()`, `retry(withHelpers:)`),
    /// whose caller may hold locks that a retry helper's `setup`/`teardown` takes. Queuing
    /// before the hop keeps two requests from one thread in their order: hopping first, as
    /// each on its own block of a concurrent queue, let a later `retryNow()` overtake an
    /// earlier `retry(withHelpers:)`.
    func submitInBackground(_ callout: Callout) {
        let runsNow = machine.withLock { $0.callouts.submit(callout) }
        if runsNow {
            DispatchQueue.global().async {
                self.performCallouts(startingWith: callout)
            }
        }
    }

    /// Performs `first` and then every callout submitted meanwhile, until the queue is empty.
    /// Called by the thread whose submission found the queue idle (outside the lock).
    func performCallouts(startingWith first: Callout) {
        perform(first)
        performQueuedCallouts()
    }

    /// Performs the callouts submitted while the calling thread performed one, until the
    /// queue is empty.
    func performQueuedCallouts() {
        while let next = machine.withLock({ $0.callouts.takeNextJobOrStopDraining() }) {
            perform(next)
        }
    }

    private func perform(_ callout: Callout) {
        switch callout {
        case .beginFirstAttempt:
            // Queued behind another callout (a `cancel()` that raced with `start()`).
            let (isCancelled, failure, expirationDate) = machine.withLock { ($0.isCancelled, $0.failureBeforeStart, $0.expirationDate) }
            beginAttempt(isRetry: false, counted: false, isCancelled: isCancelled, failureBeforeStart: failure, expirationDate: expirationDate)
        case .processAttemptEnd(let end):
            processAttemptEnd(end)
        case .processCancellation:
            processCancellation()
        case .timerFired(let generation):
            processTimerFired(forWait: generation)
        case .beginAdmittedRetry:
            beginAdmittedRetry()
        case .applyRequestedRetry(let helpers):
            applyRequestedRetry(helpers)
        case .attemptTimedOut(let attempt):
            processAttemptTimeout(attempt)
        case .attemptStopped(let attempt):
            processAttemptStop(attempt)
        case .expirationReached(let generation):
            processExpiration(duringWait: generation)
        case .failWait(let error):
            processWaitFailure(error)
        }
    }
}
