import Foundation

// The private state machine of `RetryingOperation`.
//
//     idle ──start──▶ running ──end(retry)──▶ waiting ──helper/retryNow──▶ running …
//       │               │                        │
//       │ cancelled     │ end(success/failure)   │ cancel
//       ▼               ▼                        ▼
//     finished ◀────────┴────────────────────────┘
//
// Every transition runs as a callout (`RetryingOperation+Callouts.swift`), performed one at
// a time by the operation's `CalloutQueue`, so transitions never interleave and the KVO
// `willChange`/`didChange` pairs around them are properly nested. Only callouts move the
// phase between idle, running, waiting and finished (`endAttempt` only marks a running
// attempt as ended), so a callout that has read the phase can rely on it until it returns.
// The lock (`machine`) is held only to read or write `MachineState`, never while user code
// runs or a KVO notification is posted.
//
// Linux Foundation has no real KVO: its `OperationQueue` learns that an operation started
// or finished only through `didChangeValue(forKey:)` with "isExecuting" / "isFinished",
// which `Operation` forwards to the queue. Apple's `OperationQueue` observes the same keys.

struct MachineState: Sendable {
    enum Phase: Sendable {
        case idle
        /// An attempt is running; `hasEnded` once `baseOperationEnded` was called for it
        /// (its end is then being processed).
        case running(hasEnded: Bool)
        /// Waiting for the next attempt. `generation` identifies this wait, so a timer of
        /// an earlier wait that fires late is ignored.
        case waiting(generation: UInt64, counted: Bool)
        case finished(RetryingOperation.Outcome)

        var isExecuting: Bool {
            switch self {
            case .running, .waiting: return true
            case .idle, .finished: return false
            }
        }

        var isFinished: Bool {
            if case .finished = self { return true }
            return false
        }

        var isRunningAttempt: Bool {
            if case .running(hasEnded: false) = self { return true }
            return false
        }
    }

    var phase = Phase.idle
    var hasStarted = false
    /// `cancel()` was called: `Operation.isCancelled`, readable with the state (`cancel()` is
    /// final, and sets it right after `Operation.cancel()`).
    var isCancelled = false
    var numberOfRetries = 0
    var numberOfAttempts = 0
    /// When the latest attempt started (`DispatchTime` uptime, nanoseconds); 0 before the first.
    var attemptStartedAt: UInt64 = 0
    var waitGeneration: UInt64 = 0
    var retryPolicy = RetryPolicy.default
    var retryScheduler: any RetryScheduler = DispatchRetryScheduler()
    var logHandler: RetryLogHandler?
    var driver: (any RetryingOperationDriver)?
    /// The first attempt is passed `isRetry: true` (a restored operation).
    var resumesAsRetry = false
    /// A due retry waits for the driver to admit it.
    var isAwaitingAdmission = false
    /// Set by a driver before the start: the operation finishes failed with this error instead
    /// of running (a persistent operation whose prerequisite failed for good).
    var failureBeforeStart: (any Error)?
    typealias OutcomeWaiters = [OutcomeWaiter]
    /// The tasks awaiting `finalOutcome`; a waiter whose task is cancelled removes itself.
    var outcomeWaiters: OutcomeWaiters = []
    /// The operation's progress, made the first time it is asked for (see
    /// ``RetryingOperation/progress``).
    var progress: Progress?
    /// The units ``RetryingOperation/reportProgress(completed:of:)`` reported before anyone
    /// asked for ``RetryingOperation/progress`` (which starts from them).
    var reportedUnits: (completed: Int64, total: Int64) = (0, -1)
    /// The callouts waiting to run, kept here so that a state change and the callout it
    /// submits take one lock round trip.
    var callouts = CalloutQueue<RetryingOperation.Callout>()
    /// No attempt starts at or after this date (``RetryingOperation/expirationDate``).
    var expirationDate: Date?
    /// The timeout timer of the running attempt, if its policy has an attempt timeout.
    var attemptTimer: (any ScheduledRetry)?
    /// The running synchronous attempt passed its timeout: however it ends, it ends as
    /// timed out (its thread cannot be taken back, so it is not abandoned early).
    var synchronousAttemptTimedOut = false
    /// The running synchronous attempt was stopped by its driver (a bounded run ended): unless
    /// it succeeds, it ends as an uncounted retry.
    var synchronousAttemptStopped = false
    /// Attempts abandoned at their timeout whose own `baseOperationEnded` has not come yet.
    var abandonedAttemptsOwingEnd = 0
    /// The queue that started the operation (`nil`: started by hand, or by a driver, which
    /// places every attempt itself), until it finishes: its retries start where that queue
    /// runs its operations, and its progress counts the finish
    /// (`RetryingOperation+Placement.swift`).
    var startingQueue: OperationQueue?
    /// The thread that started a synchronous operation by hand, which runs its retries.
    var starterThread: StarterThread?
    /// Where the due retry awaiting admission starts, when not just anywhere.
    var dueRetryHome: AttemptHome?
    /// The thread the due retry was handed to at ``dueRetryHome``.
    var threadReachedByDueRetry: ObjectIdentifier?
}

/// A task awaiting ``RetryingOperation/finalOutcome``. `token` identifies it, so that the
/// task's cancellation handler removes this waiter and no other.
struct OutcomeWaiter: Sendable {
    let token: ObjectIdentifier
    let continuation: CheckedContinuation<RetryingOperation.Outcome, Never>
}

/// How an attempt ended, as reported by a `baseOperationEnded` method.
enum AttemptEnd {
    enum Wait {
        case delay(TimeInterval)
        case helpers([RetryHelper])
        case policyDelay
    }

    case succeeded
    case failed(any Error)
    /// Retry after `wait`. `counted` retries increment `numberOfRetries`; when
    /// `enforcesLimit`, the retry policy may refuse it, and the operation then fails with
    /// `retryLimitReached` carrying `error` as its underlying error.
    case retry(after: Wait, counted: Bool, enforcesLimit: Bool, error: (any Error)?)
}

extension RetryingOperation {
    // MARK: Attempts

    /// Starts the first attempt (`isRetry == false`, from `start()`) or the next one (from
    /// a wait, `counted` saying whether it spends the retry budget), unless the operation
    /// `isCancelled`. A callout; the caller has seen the operation idle (first attempt: only
    /// `start()`, once, submits it) or waiting (retry).
    /// A first attempt with a `failureBeforeStart` finishes failed with it instead.
    /// `expirationDate`: the operation's, read by the caller with the rest of the state.
    func beginAttempt(isRetry: Bool, counted: Bool, isCancelled: Bool, failureBeforeStart: (any Error)? = nil, expirationDate: Date?) {
        if isCancelled {
            finish(.cancelled, wasExecuting: isRetry)
            return
        }
        if !isRetry, let failureBeforeStart {
            finish(.failed(failureBeforeStart), wasExecuting: false)
            return
        }
        if let expired = expirationError(date: expirationDate) {
            finish(.failed(expired), wasExecuting: isRetry)
            return
        }

        if !isRetry { willChangeValue(forKey: "isExecuting") }
        // Read into locals rather than returned as one tuple (see `finish`); the scheduler only
        // when an attempt timeout needs it.
        var driver: (any RetryingOperationDriver)?
        var logHandler: RetryLogHandler?
        var timeout: TimeInterval?
        var scheduler: (any RetryScheduler)?
        let (attempt, retries, passesRetry) = machine.withLock { state in
            if isRetry && counted { state.numberOfRetries += 1 }
            state.numberOfAttempts += 1
            state.attemptStartedAt = DispatchTime.now().uptimeNanoseconds
            state.phase = .running(hasEnded: false)
            state.synchronousAttemptTimedOut = false
            state.synchronousAttemptStopped = false
            driver = state.driver
            logHandler = state.logHandler
            if let attemptTimeout = state.retryPolicy.attemptTimeout {
                timeout = attemptTimeout
                scheduler = state.retryScheduler
            }
            return (state.numberOfAttempts, state.numberOfRetries, isRetry || state.resumesAsRetry)
        }
        if !isRetry { didChangeValue(forKey: "isExecuting") }

        // The handler read with the state above: no extra lock round trip on this hot path.
        log(.debug, "starting attempt \(attempt) (\(retries) counted retries so far)", to: logHandler) {
            ["attempt": "\(attempt)", "retries": "\(retries)"]
        }
        driver?.operationWillStartAttempt(self, AttemptInfo(attempt: attempt, numberOfRetries: retries, isRetry: passesRetry))
        if let timeout, let scheduler, timeout.isFinite, timeout > 0 {
            startTimeoutTimer(for: attempt, after: timeout, on: scheduler)
        }
        startBaseOperation(isRetry: passesRetry)

        guard !isAsynchronous else { return }
        // Checked and marked in one step, so a late `baseOperationEnded` from another thread
        // either wins (and its end is processed next) or is refused.
        let didNotEnd = machine.withLock { state -> Bool in
            guard state.phase.isRunningAttempt else { return false }
            state.phase = .running(hasEnded: true)
            return true
        }
        if didNotEnd {
            log(.error, "synchronous attempt \(attempt) returned without calling baseOperationEnded; the operation fails")
            finish(.failed(RetryingOperationError(
                code: .synchronousAttemptDidNotEnd,
                message: "\(type(of: self)).startBaseOperation(isRetry:) returned without calling baseOperationEnded, which a synchronous operation must do"
            )), wasExecuting: true)
        }
    }

    /// Records the end of the running attempt and submits its processing, in one lock
    /// round trip; the end itself is processed as a callout.
    ///
    /// `attempt`: the number of the attempt that ended, when the caller knows it
    /// (``baseOperationEnded(attempt:with:)``); the end is then ignored unless that attempt is
    /// the one running. `nil`: whatever attempt is running.
    func endAttempt(_ end: AttemptEnd, attempt: Int? = nil) {
        enum Reception {
            case accepted(runsNow: Bool, afterAbandoned: Bool)
            case ignoredLate(fromAbandoned: Bool)
            case ignored
        }
        // The callout and the timer are read into locals (see `finish`).
        var callout = Callout.processCancellation
        var timer: (any ScheduledRetry)?
        let reception: Reception = machine.withLock { state in
            guard state.phase.isRunningAttempt, attempt == nil || attempt == state.numberOfAttempts else {
                // A late end: from an attempt that is over (abandoned at its timeout, or ended
                // by a cancel), or, for a plain call, from one abandoned that still owes it.
                if let attempt {
                    guard attempt <= state.numberOfAttempts else { return .ignored }
                    if state.abandonedAttemptsOwingEnd > 0 { state.abandonedAttemptsOwingEnd -= 1 }
                    return .ignoredLate(fromAbandoned: false)
                }
                guard state.abandonedAttemptsOwingEnd > 0 else { return .ignored }
                state.abandonedAttemptsOwingEnd -= 1
                return .ignoredLate(fromAbandoned: true)
            }
            state.phase = .running(hasEnded: true)
            var end = end
            if state.synchronousAttemptTimedOut {
                state.synchronousAttemptTimedOut = false
                end = Self.timedOutEnd(attempt: state.numberOfAttempts, timeout: state.retryPolicy.attemptTimeout)
            } else if state.synchronousAttemptStopped {
                state.synchronousAttemptStopped = false
                if case .succeeded = end {} else { end = Self.stoppedEnd(attempt: state.numberOfAttempts) }
            }
            swap(&timer, &state.attemptTimer)
            callout = .processAttemptEnd(end)
            return .accepted(runsNow: state.callouts.submit(callout), afterAbandoned: attempt == nil && state.abandonedAttemptsOwingEnd > 0)
        }
        switch reception {
        case .accepted(let runsNow, let afterAbandoned):
            timer?.cancel()
            if afterAbandoned {
                log(.warning, "baseOperationEnded ends the running attempt, but an earlier attempt abandoned at its timeout has not ended yet: if the call came from it, end attempts with baseOperationEnded(attempt:with:), which ignores an abandoned attempt's late end")
            }
            if runsNow {
                performCallouts(startingWith: callout)
            }
        case .ignoredLate(let fromAbandoned):
            log(.info, fromAbandoned
                ? "an attempt abandoned at its timeout ended late; ignored"
                : "attempt \(attempt ?? 0) ended after it was over (abandoned at its timeout, or the operation finished); ignored")
        case .ignored:
            log(.error, "baseOperationEnded was called while no attempt was running (called twice, or after a cancel finished the operation); ignored")
        }
    }

    /// A callout, in the `running(hasEnded: true)` phase: only `endAttempt` submits it, and
    /// only this callout leaves that phase.
    func processAttemptEnd(_ end: AttemptEnd) {
        switch end {
        case .succeeded:
            finish(.succeeded, wasExecuting: true)
        case .failed(let error):
            finish(isCancelled ? .cancelled : .failed(error), wasExecuting: true)
        case .retry(let wait, let counted, let enforcesLimit, let error):
            guard !isCancelled else {
                finish(.cancelled, wasExecuting: true)
                return
            }
            let (retries, policy) = machine.withLock { ($0.numberOfRetries, $0.retryPolicy) }
            if enforcesLimit && !policy.allowsRetry(afterRetries: retries) {
                log(.info, "retry limit reached after \(retries) retries; the operation fails") {
                    self.attemptFields(["outcome": "failed", "error": error.map { String(describing: $0) }])
                }
                finish(.failed(RetryingOperationError(
                    code: .retryLimitReached,
                    message: "gave up after \(retries) retries: the retry policy allows no more",
                    underlyingError: error
                )), wasExecuting: true)
                return
            }
            if let expired = expirationError() {
                finish(.failed(expired), wasExecuting: true)
                return
            }
            /// The fields of the message that announces the retry.
            func retryFields(delay: TimeInterval?) -> [String: String] {
                attemptFields(["outcome": "retry", "counted": "\(counted)", "delay": delay.map { "\($0)" }, "error": error.map { String(describing: $0) }])
            }
            let helpers: [RetryHelper]
            switch wait {
            case .helpers(let given):
                helpers = given
                log(.info, "attempt failed; waiting for \(given.count) retry helper(s)\(counted ? "" : " (uncounted retry)")") {
                    retryFields(delay: nil)
                }
            case .delay(let delay):
                helpers = [TimerRetryHelper(retryDelay: delay, retryingOperation: self)]
                log(.info, "attempt failed; retrying in \(delay) s\(counted ? "" : " (uncounted retry)")") {
                    retryFields(delay: delay)
                }
            case .policyDelay:
                let delay = policy.delay(forRetry: retries + 1)
                helpers = [TimerRetryHelper(retryDelay: delay, retryingOperation: self)]
                log(.info, "attempt failed\(error.map { " with \($0)" } ?? ""); retrying in \(delay) s\(counted ? "" : " (uncounted retry)")") {
                    retryFields(delay: delay)
                }
            }
            let (driver, attempts) = machine.withLock { state in
                state.waitGeneration &+= 1
                state.phase = .waiting(generation: state.waitGeneration, counted: counted)
                return (state.driver, state.numberOfAttempts)
            }
            driver?.operationWillWait(self, WaitInfo(
                isCounted: counted,
                numberOfRetriesOnRetry: retries + (counted ? 1 : 0),
                numberOfAttempts: attempts,
                delay: Self.shortestTimerDelay(of: helpers),
                errorDescription: error.map { String(describing: $0) }
            ))
            install(helpers)
        }
    }

    // MARK: Waits

    /// The identifier of the current wait, read by a `TimerRetryHelper` in `setup()`.
    var currentWaitGeneration: UInt64 {
        machine.withLock { $0.waitGeneration }
    }

    /// A timer of wait `generation` fired. Runs the retry on the calling thread.
    func timerFired(forWait generation: UInt64) {
        submit(.timerFired(generation: generation))
    }

    /// The callout `timerFired(forWait:)` submits.
    func processTimerFired(forWait generation: UInt64) {
        let counted: Bool? = machine.withLock { state in
            guard case .waiting(generation, let counted) = state.phase, !state.isAwaitingAdmission else { return nil }
            return counted
        }
        guard let counted else { return }
        startDueRetry(counted: counted)
    }

    /// Ends the current wait: starts the retry, or asks the driver to admit it, or hands it to
    /// where the operation's attempts run (`RetryingOperation+Placement.swift`). A callout, in
    /// the `waiting` phase.
    private func startDueRetry(counted: Bool) {
        tearDownHelpers()
        let (driver, queue, starter, expirationDate) = machine.withLock { state in
            (state.driver, state.startingQueue, state.starterThread, state.expirationDate)
        }
        let home = AttemptHome(startedBy: queue, starter: starter)
        if driver == nil && home.isAnywhere {
            beginAttempt(isRetry: true, counted: counted, isCancelled: isCancelled, expirationDate: expirationDate)
            return
        }
        machine.withLock { state in
            state.isAwaitingAdmission = true
            state.dueRetryHome = home.isAnywhere ? nil : home
            state.threadReachedByDueRetry = nil
        }
        guard let driver else {
            runDueRetryAtHome(home)
            return
        }
        driver.operationRequestsAttempt(self) {
            self.runDueRetryAtHome(home)
        }
    }

    /// The callout the driver's admission, or the arrival of a due retry where the operation's
    /// attempts run, submits. A cancel may have finished the operation meanwhile. Performed on
    /// another thread than the one the retry was handed to (which was performing the
    /// operation's callouts), it hands the retry over again.
    func beginAdmittedRetry() {
        let thread = ObjectIdentifier(Thread.current)
        enum Next { case nothing, begin(counted: Bool, expirationDate: Date?), handOver(AttemptHome) }
        let next: Next = machine.withLock { state in
            guard case .waiting(_, let counted) = state.phase else {
                state.isAwaitingAdmission = false
                return .nothing
            }
            if let home = state.dueRetryHome, state.threadReachedByDueRetry != thread {
                return .handOver(home)
            }
            state.isAwaitingAdmission = false
            state.dueRetryHome = nil
            state.threadReachedByDueRetry = nil
            return .begin(counted: counted, expirationDate: state.expirationDate)
        }
        switch next {
        case .nothing:
            return
        case .handOver(let home):
            runDueRetryAtHome(home)
        case .begin(let counted, let expirationDate):
            beginAttempt(isRetry: true, counted: counted, isCancelled: isCancelled, expirationDate: expirationDate)
        }
    }

    /// `retryNow()` / `retry(in:)` / `retry(withHelpers:)`. A callout.
    func applyRequestedRetry(_ helpers: [RetryHelper]?) {
        let (phase, isAwaitingAdmission) = machine.withLock { ($0.phase, $0.isAwaitingAdmission) }
        guard case .waiting(_, let counted) = phase else {
            log(.warning, "a retry was requested while the operation was not waiting for one (\(phase.logDescription)); ignored")
            return
        }
        guard !isAwaitingAdmission else {
            log(.info, "a retry was requested while the next attempt was already due; ignored")
            return
        }
        if let helpers {
            tearDownHelpers()
            let wait = machine.withLock { state -> (any RetryingOperationDriver, WaitInfo)? in
                state.waitGeneration &+= 1
                state.phase = .waiting(generation: state.waitGeneration, counted: counted)
                guard let driver = state.driver else { return nil }
                return (driver, WaitInfo(
                    isCounted: counted,
                    numberOfRetriesOnRetry: state.numberOfRetries + (counted ? 1 : 0),
                    numberOfAttempts: state.numberOfAttempts,
                    delay: Self.shortestTimerDelay(of: helpers),
                    errorDescription: nil
                ))
            }
            if let (driver, info) = wait {
                driver.operationWillWait(self, info)
            }
            install(helpers)
        } else {
            startDueRetry(counted: counted)
        }
    }

    private func install(_ helpers: [RetryHelper]) {
        var helpers = helpers
        if let expiration = machine.withLock({ $0.expirationDate }) {
            // The wait ends at the expiration date at the latest: the operation then fails.
            helpers.append(ExpirationHelper(date: expiration, operation: self))
        }
        for index in helpers.indices {
            helpers[index].setup()
        }
        installedHelpers = helpers
    }

    func tearDownHelpers() {
        guard var helpers = installedHelpers else { return }
        installedHelpers = nil
        for index in helpers.indices {
            helpers[index].teardown()
        }
    }

    // MARK: Cancellation and finish

    /// The callout `cancel()` submits.
    func processCancellation() {
        let phase = machine.withLock { $0.phase }
        switch phase {
        case .running(hasEnded: false):
            if isAsynchronous { cancelBaseOperation() }
        case .waiting:
            tearDownHelpers()
            finish(.cancelled, wasExecuting: true)
        case .idle, .running(hasEnded: true), .finished:
            // Not started: `start()` will see the cancel. Ending or finished: nothing to stop.
            break
        }
    }

    /// Moves to `finished`, announcing it with KVO. A callout, in a phase other than
    /// `finished` that the caller has seen: idle (`wasExecuting == false`), running or
    /// waiting. Only callouts finish an operation, so it cannot have finished meanwhile.
    func finish(_ outcome: Outcome, wasExecuting: Bool) {
        if wasExecuting { willChangeValue(forKey: "isExecuting") }
        willChangeValue(forKey: "isFinished")
        // Read into locals rather than returned as a tuple: this runs once per operation, and
        // a tuple of optional existentials is copied through generic witnesses.
        var waiters: MachineState.OutcomeWaiters = []
        var driver: (any RetryingOperationDriver)?
        var logHandler: RetryLogHandler?
        var timer: (any ScheduledRetry)?
        var startingQueue: OperationQueue?
        var starter: StarterThread?
        var progress: Progress?
        let didFinish = machine.withLock { state -> Bool in
            guard !state.phase.isFinished else { return false }
            state.phase = .finished(outcome)
            progress = state.progress
            swap(&waiters, &state.outcomeWaiters)
            swap(&timer, &state.attemptTimer)
            swap(&startingQueue, &state.startingQueue)
            swap(&starter, &state.starterThread)
            driver = state.driver
            logHandler = state.logHandler
            state.dueRetryHome = nil
            return true
        }
        if let startingQueue, !isAsynchronous {
            // Counted before the queue hears of the finish, as a plain operation's is.
            Self.countFinish(in: startingQueue)
        }
        didChangeValue(forKey: "isFinished")
        if wasExecuting { didChangeValue(forKey: "isExecuting") }
        guard didFinish else {
            assertionFailure("finish(_:wasExecuting:) was called on a finished operation")
            return
        }
        starter?.finish()
        timer?.cancel()
        if let progress, case .succeeded = outcome { Self.complete(progress) }
        driver?.operationDidFinish(self, outcome)

        log(.debug, "finished: \(outcome)", to: logHandler) {
            self.attemptFields(["outcome": outcome.logName, "error": outcome.error.map { String(describing: $0) }], endsAttempt: wasExecuting, attemptsKey: "attempts")
        }
        for waiter in waiters {
            waiter.continuation.resume(returning: outcome)
        }
    }

    // MARK: Logging

    func log(_ level: RetryLogHandler.Level, _ text: @autoclosure () -> String) {
        log(level, text(), to: machine.withLock { $0.logHandler })
    }

    /// Logs with structured fields, built only when the message passes the handler's level.
    func log(_ level: RetryLogHandler.Level, _ text: @autoclosure () -> String, metadata: () -> [String: String]) {
        log(level, text(), to: machine.withLock { $0.logHandler }, metadata: metadata)
    }

    /// Logs to `handler`, already read from the state.
    func log(
        _ level: RetryLogHandler.Level, _ text: @autoclosure () -> String, to handler: RetryLogHandler?,
        metadata: () -> [String: String] = { [:] }
    ) {
        guard let handler, level >= handler.minimumLevel else { return }
        handler.handle(RetryLogHandler.Message(level: level, text: text(), operationDescription: logName, metadata: metadata()))
    }

    /// The fields of a message about the latest attempt: `fields` (those with a value), the
    /// attempt's number (under `attemptsKey`) and retries, and, when the message is about
    /// its end, how long it ran.
    func attemptFields(_ fields: [String: String?], endsAttempt: Bool = true, attemptsKey: String = "attempt") -> [String: String] {
        let (attempts, retries, startedAt) = machine.withLock { ($0.numberOfAttempts, $0.numberOfRetries, $0.attemptStartedAt) }
        var metadata = fields.compactMapValues { $0 }
        metadata[attemptsKey] = "\(attempts)"
        metadata["retries"] = "\(retries)"
        if endsAttempt, startedAt != 0 {
            let now = DispatchTime.now().uptimeNanoseconds
            metadata["duration"] = String(format: "%.6f", Double(now &- startedAt) / 1e9)
        }
        return metadata
    }

    private var logName: String {
        name ?? "\(type(of: self)) \(ObjectIdentifier(self))"
    }
}

extension MachineState.Phase {
    var logDescription: String {
        switch self {
        case .idle: return "not started"
        case .running: return "running an attempt"
        case .waiting: return "waiting to retry"
        case .finished(let outcome): return "finished, \(outcome)"
        }
    }
}
