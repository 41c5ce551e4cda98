import Foundation

/// An abstract `Operation` that retries its work.
///
/// Subclass it, say whether the work is synchronous or asynchronous, and implement one
/// attempt in ``startBaseOperation(isRetry:)``. When the attempt is over, call one of the
/// `baseOperationEnded` methods: that decides whether the operation finishes or waits and
/// retries. The class manages `isExecuting` / `isFinished` (announced with KVO, so
/// `OperationQueue`, dependencies, `waitUntilFinished()` and `completionBlock` work on
/// Linux and Apple platforms), the wait before each retry, cancellation and the retry
/// count.
///
/// ```swift
/// final class UploadOperation: RetryingOperation, @unchecked Sendable {
///     let file: URL
///     init(file: URL) { self.file = file; super.init() }
///
///     override var isAsynchronous: Bool { true }
///
///     override func startBaseOperation(isRetry: Bool) {
///         uploader.upload(file) { result in
///             switch result {
///             case .success: self.baseOperationEnded()
///             case .failure(let error) where error.isTransient:
///                 self.baseOperationEnded(withRetriableError: error)   // the retry policy decides
///             case .failure(let error):
///                 self.baseOperationEnded(failingWith: error)          // no retry
///             }
///         }
///     }
///
///     override func cancelBaseOperation() { uploader.cancel(file) }
/// }
/// ```
///
/// ## Rules
///
/// - Call exactly one `baseOperationEnded` method per attempt, from any thread. A
///   synchronous operation (``isAsynchronous`` is `false`) must call it before
///   ``startBaseOperation(isRetry:)`` returns.
/// - ``startBaseOperation(isRetry:)``, ``cancelBaseOperation()`` and the retry helpers'
///   `setup()` / `teardown()` are called one at a time, never concurrently with each other
///   (except ``cancelBaseOperation()`` of a *synchronous* operation, which is called from
///   the thread that cancels, while the attempt runs — as in the earlier library). Make no
///   other assumption about the thread they run on, beyond where attempts start (below).
/// - Cancelled operations are never retried, and an operation cancelled before it starts
///   never starts an attempt — also when the cancel is what made it ready (its dependencies
///   are then ignored, as for any `Operation`). Cancelling while waiting for a retry tears
///   the retry helpers down and finishes the operation at once.
/// - Waiting for a retry never blocks a thread: the operation stays executing (it keeps
///   its slot in a bounded `OperationQueue`), and nothing runs on its queue's threads
///   meanwhile.
/// - `OperationQueue.progress` counts a synchronous operation as it counts a plain
///   synchronous `Operation` (one unit when it finishes, once the progress has a total), and
///   an asynchronous one as a plain asynchronous `Operation` (not at all).
///
/// ## Where attempts run
///
/// The first attempt runs where `start()` is called. Every retry of a *synchronous* operation
/// runs where the queue that started it runs its operations:
///
/// | Started by | Retries run on |
/// | --- | --- |
/// | `OperationQueue.main` | the main thread (main dispatch queue) |
/// | a queue with an `underlyingQueue` | that dispatch queue |
/// | any other queue | a background thread (the retry scheduler's, or the one that ended the wait) |
/// | `start()` by hand | the thread that called `start()`, which `start()` keeps until the operation finishes, as `start()` of any synchronous `Operation` does |
///
/// (On Linux the main queue runs on the main thread while that thread turns the main run loop,
/// `RunLoop.main.run()`; after `dispatchMain()`, Linux's libdispatch drains the main queue on
/// another thread — for plain operations and blocks too.)
///
/// So every attempt of a synchronous operation on the main queue may update the UI, and a wait
/// on a serial underlying queue lets the queue's other work run meanwhile. `OperationQueue.current`
/// is the queue during the first attempt only (and the main queue on the main thread): a retry
/// runs outside the queue's own bookkeeping, which keeps the operation's slot while it waits.
///
/// ```swift
/// // `operation` is synchronous: every attempt runs on the main thread, and may update the UI.
/// OperationQueue.main.addOperation(operation)
/// ```
///
/// The retries of an *asynchronous* operation start on a background thread, wherever it was
/// started: its attempt only starts work that ends on a thread of its own choosing. Hop to the
/// main queue yourself where an attempt touches the UI. (Following the queue would cost every
/// asynchronous operation about a quarter of its running cost on Linux.)
/// ``cancelBaseOperation()`` and the retry helpers are called wherever the cancel or the end
/// of the wait happens. A synchronous operation whose `start()` you call from inside another
/// operation running on a queue other than the main queue counts as started by that queue: its
/// `start()` returns after the first attempt.
///
/// ## Thread safety
///
/// Every public member may be called from any thread. The class is `@unchecked Sendable`
/// because its mutable state is either behind one lock or confined to the operation's
/// serial callout queue.
open class RetryingOperation: Operation, @unchecked Sendable {
    // @unchecked: shared state lives in `machine` (a `Locked`); `installedHelpers` is only
    // touched by callouts, which run one at a time (see `MachineState.callouts`).

    let machine = Locked(MachineState())
    var installedHelpers: [RetryHelper]?

    /// Creates an operation that has not started yet.
    public override init() {
        super.init()
    }

    /// Whether one attempt ends before ``startBaseOperation(isRetry:)`` returns (`false`)
    /// or later, from any thread (`true`).
    ///
    /// Subclasses must override it: there is no good default for an operation whose
    /// attempts may be either.
    ///
    /// ```swift
    /// override var isAsynchronous: Bool { true }
    /// ```
    open override var isAsynchronous: Bool {
        // (fatalError, not preconditionFailure: its message is kept in release builds.)
        fatalError("\(type(of: self)) must override isAsynchronous: RetryingOperation subclasses say whether their attempts are synchronous or asynchronous")
    }

    // MARK: - For subclasses

    /// Starts one attempt. Subclasses override it; never call it yourself.
    ///
    /// - Parameter isRetry: `false` for the first attempt, `true` for every retry.
    ///
    /// A synchronous operation does its work here and calls a `baseOperationEnded` method
    /// before returning. An asynchronous one starts the work, returns as soon as possible,
    /// and calls a `baseOperationEnded` method when the work is over.
    ///
    /// ```swift
    /// override func startBaseOperation(isRetry: Bool) {
    ///     do {
    ///         try store.flush()
    ///         baseOperationEnded()
    ///     } catch {
    ///         baseOperationEnded(withRetriableError: error)
    ///     }
    /// }
    /// ```
    open func startBaseOperation(isRetry: Bool) {
    }

    /// Stops the attempt in progress. Called when the operation is cancelled while an
    /// attempt runs; `isCancelled` is already `true`. Subclasses override it; never call it
    /// yourself.
    ///
    /// The attempt must still end with a `baseOperationEnded` method; whatever it passes,
    /// a cancelled operation finishes with ``RetryingOperation/Outcome/cancelled`` (unless
    /// it reports success). Handle a call that races with the end of the attempt gracefully.
    ///
    /// ```swift
    /// override func cancelBaseOperation() { task?.cancel() }
    /// ```
    open func cancelBaseOperation() {
    }

    /// Stops an attempt that the operation gives up on while the operation goes on: an
    /// attempt that ran longer than ``RetryPolicy/attemptTimeout``
    /// (``AbandonReason/timedOut``). The operation is not cancelled (`isCancelled` is
    /// `false`); the attempt already counts as ended. What it reports afterwards through
    /// ``baseOperationEnded(attempt:with:)`` is ignored; a plain `baseOperationEnded` call is
    /// ignored only until the next attempt starts (it cannot say which attempt it comes from).
    /// Subclasses may override it; never call it yourself.
    ///
    /// The default implementation calls ``cancelBaseOperation()``, which stops the work the
    /// way a cancel does — what most operations want. Override this method when your
    /// ``cancelBaseOperation()`` does more than stop the attempt (it treats the whole operation
    /// as cancelled, say). Like ``cancelBaseOperation()``, it is called one at a time with the
    /// other callouts for an asynchronous operation, and from the timer's thread while the
    /// attempt runs for a synchronous one.
    ///
    /// ```swift
    /// override func abandonBaseOperation(_ reason: AbandonReason) {
    ///     uploader.cancel(file)      // stop this attempt only: the next one uploads again
    /// }
    /// ```
    open func abandonBaseOperation(_ reason: AbandonReason) {
        cancelBaseOperation()
    }

    /// Ends the current attempt successfully: the operation finishes with
    /// ``Outcome/succeeded``.
    ///
    /// ```swift
    /// baseOperationEnded()
    /// ```
    public final func baseOperationEnded() {
        endAttempt(.succeeded)
    }

    /// Ends the current attempt and retries after `delay` seconds.
    ///
    /// The retry counts in ``numberOfRetries`` but is not checked against
    /// ``retryPolicy``, exactly as in the earlier library. To let the policy limit retries,
    /// use ``baseOperationEnded(withRetriableError:)`` or
    /// ``baseOperationEnded(needsRetryIn:countsTowardRetryLimit:)``.
    ///
    /// ```swift
    /// baseOperationEnded(needsRetryIn: 5)
    /// ```
    public final func baseOperationEnded(needsRetryIn delay: TimeInterval) {
        endAttempt(.retry(after: .delay(delay), counted: true, enforcesLimit: false, error: nil))
    }

    /// Ends the current attempt and waits for `retryHelpers` before the next one.
    ///
    /// - Parameter retryHelpers: `nil` ends the operation successfully (no retry); an empty
    ///   array waits until ``retryNow()``, ``retry(in:)`` or ``retry(withHelpers:)`` is
    ///   called, or the operation is cancelled.
    ///
    /// The retry counts in ``numberOfRetries`` but is not checked against
    /// ``retryPolicy``, exactly as in the earlier library.
    ///
    /// ```swift
    /// baseOperationEnded(retryHelpers: [NetworkIsBackRetryHelper(operation: self)])
    /// ```
    public final func baseOperationEnded(retryHelpers: [RetryHelper]?) {
        guard let retryHelpers else {
            endAttempt(.succeeded)
            return
        }
        endAttempt(.retry(after: .helpers(retryHelpers), counted: true, enforcesLimit: false, error: nil))
    }

    /// Ends the current attempt as a failure that must not be retried: the operation
    /// finishes with ``Outcome/failed(_:)`` carrying `error`.
    ///
    /// ```swift
    /// baseOperationEnded(failingWith: UploadError.fileTooLarge)
    /// ```
    public final func baseOperationEnded(failingWith error: any Error) {
        endAttempt(.failed(error))
    }

    /// Ends the current attempt with an error that may go away, and lets ``retryPolicy``
    /// decide: while the policy allows another counted retry, the operation waits for the
    /// policy's backoff delay and retries; otherwise it finishes with ``Outcome/failed(_:)``
    /// carrying a ``RetryingOperationError`` whose code is
    /// ``RetryingOperationError/Code-swift.struct/retryLimitReached`` and whose
    /// ``RetryingOperationError/underlyingError`` is `error`.
    ///
    /// ```swift
    /// do {
    ///     try store.flush()
    ///     baseOperationEnded()
    /// } catch let error as POSIXError where error.code == .EAGAIN {
    ///     baseOperationEnded(withRetriableError: error)   // may go away: the policy decides
    /// } catch {
    ///     baseOperationEnded(failingWith: error)
    /// }
    /// ```
    public final func baseOperationEnded(withRetriableError error: any Error) {
        endAttempt(.retry(after: .policyDelay, counted: true, enforcesLimit: true, error: error))
    }

    /// Ends the current attempt and retries after `delay` seconds, saying whether the
    /// retry uses up the retry budget.
    ///
    /// - Parameters:
    ///   - delay: Seconds to wait before the next attempt.
    ///   - countsTowardRetryLimit: `true` for an ordinary retry: it increments
    ///     ``numberOfRetries`` and, once ``retryPolicy`` allows no more retries, the
    ///     operation fails with ``RetryingOperationError/Code-swift.struct/retryLimitReached``
    ///     instead (with no underlying error: this call reports none). `false` for a conditional retry — waiting for the network, a lock, a
    ///     rate limit — which neither counts nor is limited.
    ///
    /// ```swift
    /// // The server asked us to come back later: that is not a failure of ours.
    /// baseOperationEnded(needsRetryIn: retryAfter, countsTowardRetryLimit: false)
    /// ```
    public final func baseOperationEnded(needsRetryIn delay: TimeInterval, countsTowardRetryLimit: Bool) {
        endAttempt(.retry(after: .delay(delay), counted: countsTowardRetryLimit, enforcesLimit: countsTowardRetryLimit, error: nil))
    }

    /// Ends the current attempt and waits for `retryHelpers`, saying whether the retry uses
    /// up the retry budget (see ``baseOperationEnded(needsRetryIn:countsTowardRetryLimit:)``).
    ///
    /// ```swift
    /// // Wait for connectivity without spending a retry.
    /// baseOperationEnded(retryHelpers: [NetworkIsBackRetryHelper(operation: self)],
    ///                    countsTowardRetryLimit: false)
    /// ```
    public final func baseOperationEnded(retryHelpers: [RetryHelper], countsTowardRetryLimit: Bool) {
        endAttempt(.retry(after: .helpers(retryHelpers), counted: countsTowardRetryLimit, enforcesLimit: countsTowardRetryLimit, error: nil))
    }

    // MARK: - Controlling a wait

    /// Skips the rest of the current wait and retries now.
    ///
    /// Does nothing (and logs a warning) unless the operation is waiting for a retry. The
    /// retry starts where the operation's attempts run (see "Where attempts run" in the class
    /// documentation), never inline on the caller's thread.
    ///
    /// ```swift
    /// reachability.onReachable = { operation.retryNow() }
    /// ```
    public final func retryNow() {
        retry(withHelpers: nil)
    }

    /// Replaces the current wait with a wait of `delay` seconds.
    ///
    /// Does nothing (and logs a warning) unless the operation is waiting for a retry.
    ///
    /// ```swift
    /// operation.retry(in: 1)
    /// ```
    public final func retry(in delay: TimeInterval) {
        retry(withHelpers: [TimerRetryHelper(retryDelay: delay, retryingOperation: self)])
    }

    /// Replaces the current wait: tears the current retry helpers down, then sets
    /// `helpers` up, or retries now when `helpers` is `nil`.
    ///
    /// An empty array waits until the next call to one of the `retry` methods. Does
    /// nothing (and logs a warning) unless the operation is waiting for a retry.
    ///
    /// ```swift
    /// operation.retry(withHelpers: [NetworkIsBackRetryHelper(operation: operation)])
    /// ```
    public final func retry(withHelpers helpers: [RetryHelper]?) {
        submitInBackground(.applyRequestedRetry(helpers))
    }

    // MARK: - Configuration

    /// How ``baseOperationEnded(withRetriableError:)`` and counted retries decide whether
    /// and when to retry. Defaults to ``RetryPolicy/default``.
    ///
    /// Set it before the operation starts; a change applies to the next decision.
    ///
    /// ```swift
    /// operation.retryPolicy = RetryPolicy(retryLimit: .maximum(5), backoff: .constant(2))
    /// ```
    public var retryPolicy: RetryPolicy {
        get { machine.withLock { $0.retryPolicy } }
        set { machine.withLock { $0.retryPolicy = newValue } }
    }

    /// What measures the waits before retries. Defaults to a ``DispatchRetryScheduler``;
    /// tests set a ``ManualRetryScheduler`` to run retry logic without real waiting.
    ///
    /// Set it before the operation starts.
    ///
    /// ```swift
    /// let clock = ManualRetryScheduler()
    /// operation.retryScheduler = clock
    /// ```
    public var retryScheduler: any RetryScheduler {
        get { machine.withLock { $0.retryScheduler } }
        set { machine.withLock { $0.retryScheduler = newValue } }
    }

    /// Receives what the operation has to say: retries scheduled, misuse warnings,
    /// outcomes. `nil` (the default) logs nothing.
    ///
    /// ```swift
    /// operation.logHandler = RetryLogHandler(minimumLevel: .info) { message in
    ///     logger.log("\(message)")
    /// }
    /// ```
    public var logHandler: RetryLogHandler? {
        get { machine.withLock { $0.logHandler } }
        set { machine.withLock { $0.logHandler = newValue } }
    }

    // MARK: - Progress and outcome

    /// The number of counted retries started so far: `0` during the first attempt and the
    /// wait that follows it, `1` during the second attempt, and so on. `nil` before the
    /// operation starts and after it finishes. Uncounted (conditional) retries do not
    /// increase it.
    ///
    /// ```swift
    /// override func startBaseOperation(isRetry: Bool) {
    ///     print("attempt after \(numberOfRetries ?? 0) retries")
    /// }
    /// ```
    public var numberOfRetries: Int? {
        machine.withLock { state in
            state.phase.isExecuting ? state.numberOfRetries : nil
        }
    }

    /// The number of attempts started so far, counted and uncounted retries included. Kept
    /// after the operation finishes. During an attempt, it is that attempt's number (what
    /// ``baseOperationEnded(attempt:with:)`` takes). A persistent operation restored after a
    /// restart continues the count of its earlier launches, an attempt interrupted by the end
    /// of the process included.
    ///
    /// ```swift
    /// print("finished after \(operation.numberOfAttempts) attempts")
    /// ```
    public var numberOfAttempts: Int {
        machine.withLock { $0.numberOfAttempts }
    }

    /// Whether the operation is waiting for its next attempt.
    ///
    /// ```swift
    /// if operation.isWaitingToRetry { operation.retryNow() }
    /// ```
    public var isWaitingToRetry: Bool {
        machine.withLock { state in
            if case .waiting = state.phase { return true }
            return false
        }
    }

    /// How the operation ended, or `nil` while it has not finished.
    ///
    /// ```swift
    /// operation.waitUntilFinished()
    /// if case .failed(let error)? = operation.outcome { report(error) }
    /// ```
    public var outcome: Outcome? {
        machine.withLock { state in
            if case .finished(let outcome) = state.phase { return outcome }
            return nil
        }
    }

    /// How the operation ended, awaited without blocking a thread.
    ///
    /// Returns at once when the operation has already finished. Cancelling the awaiting
    /// task does not cancel the operation.
    ///
    /// - Important: When the awaiting `Task` is cancelled before the operation finishes,
    ///   this returns ``Outcome/cancelled`` at once — the wait was cancelled, not the
    ///   operation, which goes on (its ``outcome`` stays `nil` until it finishes). So a
    ///   timeout raced against the operation in a task group never hangs, and no
    ///   continuation is leaked. Check `Task.isCancelled` (or ``outcome``) when you must
    ///   tell the two apart; cancel the operation itself with `cancel()`.
    ///
    /// ```swift
    /// queue.addOperation(operation)
    /// let outcome = await operation.finalOutcome
    /// ```
    ///
    /// Waiting at most ten seconds:
    ///
    /// ```swift
    /// let outcome = await withTaskGroup(of: RetryingOperation.Outcome?.self) { group in
    ///     group.addTask { await operation.finalOutcome }
    ///     group.addTask { try? await Task.sleep(for: .seconds(10)); return nil }
    ///     let first = await group.next() ?? nil
    ///     group.cancelAll()        // the wait that lost returns at once
    ///     return first
    /// }
    /// if outcome == nil { operation.cancel() }   // timed out
    /// ```
    public var finalOutcome: Outcome {
        get async {
            // The token's identity names this wait; it lives until the wait is over.
            let token = WaitToken()
            let id = ObjectIdentifier(token)
            let outcome = await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let immediate: Outcome? = machine.withLock { state in
                        if case .finished(let outcome) = state.phase { return outcome }
                        // Checked under the lock: a cancellation after this finds the waiter.
                        if Task.isCancelled { return .cancelled }
                        state.outcomeWaiters.append(OutcomeWaiter(token: id, continuation: continuation))
                        return nil
                    }
                    if let immediate { continuation.resume(returning: immediate) }
                }
            } onCancel: {
                let waiter: OutcomeWaiter? = machine.withLock { state in
                    guard let index = state.outcomeWaiters.firstIndex(where: { $0.token == id }) else { return nil }
                    return state.outcomeWaiters.remove(at: index)
                }
                waiter?.continuation.resume(returning: .cancelled)
            }
            // Keeps the token (and so its identifier) alive until the wait is over.
            withExtendedLifetime(token) {}
            return outcome
        }
    }

    // MARK: - Operation

    /// Starts the first attempt. An `OperationQueue` calls it; call it yourself only to run
    /// the operation without a queue.
    ///
    /// A cancelled operation finishes as ``RetryingOperation/Outcome/cancelled`` without
    /// starting an attempt; a second call is ignored (and logged). Like `start()` of any
    /// synchronous `Operation`, that of a synchronous operation started outside a queue
    /// returns only once the operation has finished, retries included.
    ///
    /// ```swift
    /// operation.start()
    /// ```
    public final override func start() {
        let isAsynchronous = self.isAsynchronous
        // Only a synchronous operation's retries follow its queue: reading the queue costs
        // about 0.5 µs on Linux, a quarter of what running an asynchronous operation costs.
        let queue = isAsynchronous ? nil : queueStartingIt()
        // Marking the start, submitting the first attempt and reading whether the operation
        // is cancelled take one lock round trip; what it reads goes into locals (see `finish`).
        var failure: (any Error)?
        var expirationDate: Date?
        var starter: StarterThread?
        let submission = machine.withLock { state -> (runsNow: Bool, isCancelled: Bool)? in
            guard !state.hasStarted else { return nil }
            state.hasStarted = true
            if state.driver == nil {
                // Where the retries start (a driver places every attempt itself). Started by
                // hand, a synchronous operation keeps the calling thread until it finishes,
                // and runs its retries there.
                state.startingQueue = queue
                if queue == nil && !isAsynchronous { state.starterThread = StarterThread() }
            }
            failure = state.failureBeforeStart
            expirationDate = state.expirationDate
            starter = state.starterThread
            return (state.callouts.submit(.beginFirstAttempt), state.isCancelled)
        }
        guard let submission else {
            log(.error, "start() was called on an operation that had already started; ignored")
            return
        }
        if submission.runsNow {
            // The `beginFirstAttempt` callout, with the cancellation read above.
            beginAttempt(isRetry: false, counted: false, isCancelled: submission.isCancelled,
                         failureBeforeStart: failure, expirationDate: expirationDate)
            performQueuedCallouts()
        }
        starter?.runJobsUntilFinished()
    }

    /// Cancels the operation. An attempt in progress is asked to stop with
    /// ``cancelBaseOperation()``; a wait for a retry ends at once.
    public final override func cancel() {
        // Recorded before `Operation.cancel()`, which makes an operation waiting for its
        // dependencies ready: the queue may start it at once, and `start()` must see the cancel.
        let (isRunningAttempt, driver, progress) = machine.withLock { state -> (Bool, (any RetryingOperationDriver)?, Progress?) in
            state.isCancelled = true
            return (state.phase.isRunningAttempt, state.driver, state.progress)
        }
        if let progress, !progress.isCancelled { progress.cancel() }
        super.cancel()
        driver?.operationWasCancelled(self)
        if isRunningAttempt && !isAsynchronous {
            cancelBaseOperation()
        }
        submit(.processCancellation)
    }

    /// Whether the operation is running an attempt or waiting for the next one. Changes are
    /// announced with KVO, which `OperationQueue` relies on (on Linux too).
    public final override var isExecuting: Bool {
        machine.withLock { $0.phase.isExecuting }
    }

    /// Whether the operation has finished; ``RetryingOperation/outcome`` then says how.
    /// Changes are announced with KVO.
    public final override var isFinished: Bool {
        machine.withLock { $0.phase.isFinished }
    }
}
