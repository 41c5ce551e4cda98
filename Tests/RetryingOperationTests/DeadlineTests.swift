import Foundation
import Testing
@testable import RetryingOperation

/// An asynchronous operation whose attempts end only when the test says so, through the
/// completion each attempt leaves behind (captured with its attempt number, as the docs of
/// `baseOperationEnded(attempt:with:)` show).
final class ManuallyEndedOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: mutable state is in `LockedBox`es.
    private let completions = LockedBox<[Int: @Sendable (AttemptResult) -> Void]>([:])
    let events = EventLog()
    let started = DispatchSemaphore(value: 0)
    /// Whether `cancelBaseOperation()` is also called by the default `abandonBaseOperation`.
    let overridesAbandon: Bool

    init(clock: ManualRetryScheduler, policy: RetryPolicy, overridesAbandon: Bool = false) {
        self.overridesAbandon = overridesAbandon
        super.init()
        retryScheduler = clock
        retryPolicy = policy
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        events.append("start \(attempt)")
        completions.withLock { $0[attempt] = { result in self.baseOperationEnded(attempt: attempt, with: result) } }
        started.signal()
    }

    override func cancelBaseOperation() {
        events.append("cancelBaseOperation (isCancelled: \(isCancelled))")
    }

    override func abandonBaseOperation(_ reason: AbandonReason) {
        events.append("abandon \(reason)")
        if !overridesAbandon { super.abandonBaseOperation(reason) }
    }

    /// Ends attempt `attempt` now, whether or not it is still the running one.
    func end(attempt: Int, with result: AttemptResult) {
        let completion = completions.withLock { $0[attempt] }
        completion?(result)
    }

    func waitForStart() -> Bool { started.wait(timeout: .now() + 10) == .success }
}

@Suite(.timeLimit(.minutes(1)))
struct AttemptTimeoutTests {
    @Test func anAttemptThatNeverCallsBackIsAbandonedAtItsTimeoutAndRetried() async throws {
        // Given an operation with a 10 s attempt timeout and 1 s between retries, on a test clock
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(3), backoff: .constant(1), jitter: .none, attemptTimeout: 10))
        let log = LogCapture()
        operation.logHandler = log.handler
        operation.start()
        #expect(operation.waitForStart())

        // When the first attempt runs past its timeout
        clock.advance(by: 9.9)
        #expect(operation.events.all == ["start 1"])
        clock.advance(by: 0.1)

        // Then it is abandoned through the default hook, which calls cancelBaseOperation without
        // cancelling the operation, and the retry waits for the policy's delay
        #expect(operation.events.all == ["start 1", "abandon timedOut", "cancelBaseOperation (isCancelled: false)"])
        #expect(operation.isWaitingToRetry)
        #expect(clock.pendingDelays == [1])
        #expect(!operation.isCancelled)

        // And its late end, during the wait, is ignored
        operation.end(attempt: 1, with: .succeeded)
        #expect(operation.isWaitingToRetry)

        // When the second attempt starts, and the first one's completion comes again
        clock.advance(by: 1)
        #expect(operation.waitForStart())
        operation.end(attempt: 1, with: .failed(TestError("late")))

        // Then the second attempt is still running; its own end finishes the operation
        #expect(operation.isExecuting && !operation.isWaitingToRetry)
        operation.end(attempt: 2, with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
        #expect(log.texts(at: .warning).contains { $0.contains("attempt 1 ran longer than its timeout of 10.0 s; abandoned") })
        #expect(log.texts(at: .info).filter { $0.contains("attempt 1 ended after it was over") }.count == 2)
        // The second attempt's timer was cancelled when it ended
        #expect(clock.pendingCount == 0)
    }

    @Test func timedOutAttemptsAreCountedAndTheLimitEndsThemWithTheTimeoutAsUnderlyingError() async {
        // Given an operation allowed one retry, whose attempts never end
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(1), backoff: .constant(2), jitter: .none, attemptTimeout: 5))
        operation.start()
        #expect(operation.waitForStart())
        // When both attempts time out
        clock.advance(by: 5)
        #expect(operation.numberOfRetries == 0)
        clock.advance(by: 2)
        #expect(operation.waitForStart())
        #expect(operation.numberOfRetries == 1)
        clock.advance(by: 5)
        // Then the operation gives up: retryLimitReached carrying attemptTimedOut
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached)
        #expect((error?.underlyingError as? RetryingOperationError)?.code == .attemptTimedOut)
        #expect(operation.numberOfAttempts == 2)
        #expect(clock.pendingCount == 0)
    }

    @Test func anAttemptThatEndsInTimeCancelsItsTimer() async {
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(attemptTimeout: 30))
        operation.start()
        #expect(operation.waitForStart())
        #expect(clock.pendingDelays == [30])
        operation.end(attempt: 1, with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(clock.pendingCount == 0)
        #expect(!operation.events.all.contains("abandon timedOut"))
    }

    @Test func anOverriddenHookIsCalledInsteadOfTheCancelHook() async {
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(0), attemptTimeout: 1), overridesAbandon: true)
        operation.start()
        #expect(operation.waitForStart())
        clock.advance(by: 1)
        #expect((await operation.finalOutcome.error as? RetryingOperationError)?.code == .retryLimitReached)
        #expect(operation.events.all == ["start 1", "abandon timedOut"])
    }

    @Test func aCancelledOperationWhoseAttemptIgnoresTheCancelFinishesCancelledAtTheTimeout() async {
        // Given a running attempt that does not stop when cancelled
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(attemptTimeout: 3))
        operation.start()
        #expect(operation.waitForStart())
        operation.cancel()
        #expect(!operation.isFinished)
        // When its timeout passes, the operation finishes cancelled: no retry
        clock.advance(by: 3)
        let outcome = await operation.finalOutcome
        #expect(outcome.description == "cancelled")
        #expect(operation.numberOfAttempts == 1)
    }

    @Test func aPlainEndFromAnAbandonedAttemptDuringTheWaitIsIgnoredAndOneDuringTheNextAttemptIsFlagged() async {
        // Given a subclass that ends attempts with the plain methods
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.forgetToEnd, .forgetToEnd], scheduler: clock)
        operation.retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(1), jitter: .none, attemptTimeout: 4)
        let log = LogCapture()
        operation.logHandler = log.handler
        operation.start()
        #expect(await onDedicatedThread { operation.attemptStarted.wait(timeout: .now() + 10) == .success })
        // When the attempt times out and ends late, during the wait
        clock.advance(by: 4)
        operation.baseOperationEnded(withRetriableError: TestError("late"))
        // Then that end is ignored: the wait goes on
        #expect(operation.isWaitingToRetry)
        #expect(log.texts(at: .info).contains { $0.contains("an attempt abandoned at its timeout ended late; ignored") })

        // When the next attempt times out too, and a plain end comes during the third attempt
        clock.advance(by: 1)
        #expect(await onDedicatedThread { operation.attemptStarted.wait(timeout: .now() + 10) == .success })
        clock.advance(by: 4)
        clock.advance(by: 1)
        #expect(await onDedicatedThread { operation.attemptStarted.wait(timeout: .now() + 10) == .success })
        operation.baseOperationEnded()
        // Then a plain call cannot say which attempt it comes from: it ends the running one,
        // and the log says how to avoid that
        #expect(await operation.finalOutcome.isSuccess)
        #expect(log.texts(at: .warning).contains { $0.contains("end attempts with baseOperationEnded(attempt:with:)") })
    }

    @Test func aSynchronousAttemptPastItsTimeoutIsToldOnTheTimerThreadAndEndsAsTimedOut() async throws {
        // Given a synchronous operation whose first attempt blocks until its cancel hook runs
        let clock = ManualRetryScheduler()
        let operation = BlockingSynchronousOperation()
        operation.retryScheduler = clock
        operation.retryPolicy = RetryPolicy(retryLimit: .maximum(2), backoff: .constant(1), jitter: .none, attemptTimeout: 2)
        let queue = OperationQueue()
        queue.addOperation(operation)

        // When its timeout passes: the hook runs on the timer's thread (the one that advances
        // the clock, as soon as the attempt blocks a thread of the queue's), the attempt returns
        // and reports success
        let blocked = await onDedicatedThread { () -> Bool in
            let blocked = operation.firstAttemptBlocked.wait(timeout: .now() + 10) == .success
            clock.advance(by: 2)
            return blocked
        }
        #expect(blocked)

        // Then the success does not count: the attempt ended as timed out, and the retry runs
        await clock.waitForScheduledRetries(count: 1)
        #expect(operation.isWaitingToRetry)
        clock.advance(by: 1)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
        #expect(operation.hookCalls.withLock { $0 } == 1)
    }

    @Test func anAsyncOperationsTaskIsCancelledAtTheTimeoutAndItsLateResultIgnored() async throws {
        // Given an async operation whose first attempt ignores cancellation until released,
        // then returns; its second attempt fails for good once released
        let clock = ManualRetryScheduler()
        let firstAttemptCancelled = AsyncGate()
        let releaseFirst = AsyncGate()
        let secondStarted = AsyncGate()
        let releaseSecond = AsyncGate()
        let operation = AsyncRetryingOperation(
            retryPolicy: RetryPolicy(retryLimit: .maximum(3), backoff: .constant(1), jitter: .none, attemptTimeout: 10),
            isRetriable: { !($0 is TestError) }
        ) { attempt in
            if attempt.number == 1 {
                try? await Task.sleep(for: .seconds(3600))   // ends when the task is cancelled
                await firstAttemptCancelled.open()
                await releaseFirst.wait()
                return   // a late "success"
            }
            await secondStarted.open()
            await releaseSecond.wait()
            throw TestError("second")
        }
        operation.retryScheduler = clock
        operation.start()
        await clock.waitForScheduledRetries(count: 1)   // the timeout timer

        // When the first attempt times out, its task is cancelled
        clock.advance(by: 10)
        await firstAttemptCancelled.wait()
        // And the second attempt starts before the first one's task returns
        clock.advance(by: 1)
        await secondStarted.wait()
        await releaseFirst.open()
        // Then the first task's late return does not end the second attempt
        try await Task.sleep(for: .milliseconds(50))
        #expect(!operation.isFinished)
        await releaseSecond.open()
        #expect(await operation.finalOutcome.error as? TestError == TestError("second"))
        #expect(operation.numberOfAttempts == 2)
    }

    @Test func aWrapperCancelsAStuckBaseOperationAndRunsAFreshCopy() async {
        // Given a wrapper around a download whose first run hangs until cancelled
        let clock = ManualRetryScheduler()
        let wrapper = RetryableOperationWrapper(baseOperation: HangingDownload(hangs: true), retryLimit: .maximum(2))
        wrapper.retryScheduler = clock
        wrapper.retryPolicy.backoff = .constant(1)
        wrapper.retryPolicy.jitter = .none
        wrapper.retryPolicy.attemptTimeout = 5
        #expect(wrapper.retryPolicy.retryLimit == .maximum(2))
        wrapper.start()
        await clock.waitForScheduledRetries(count: 1)
        // When the timeout passes, the base operation is cancelled, and a fresh copy runs
        clock.advance(by: 5)
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 1)
        // Then the wrapper succeeds with the copy
        #expect(await wrapper.finalOutcome.isSuccess)
        #expect(wrapper.numberOfAttempts == 2)
        #expect(wrapper.originalBaseOperation.isCancelled)
        #expect(wrapper.currentBaseOperation !== wrapper.originalBaseOperation)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ExpirationTests {
    @Test func anOperationStartedAfterItsExpirationFailsWithoutAnAttempt() async {
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.succeed], scheduler: clock)
        operation.expirationDate = clock.now
        operation.start()
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .expired)
        #expect(operation.numberOfAttempts == 0)
        #expect(operation.startCount == 0)
    }

    @Test func anOperationWaitingToRetryFailsAtItsExpirationDate() async {
        // Given an operation that waits 100 s for its retry and expires in 10 s
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retryIn(100), .succeed], scheduler: clock)
        operation.expirationDate = clock.now.addingTimeInterval(10)
        operation.start()
        await clock.waitForScheduledRetries(count: 2)
        #expect(clock.pendingDelays == [10, 100])
        // When the expiration date comes
        clock.advance(by: 10)
        // Then it fails as expired, its wait torn down, and no second attempt starts
        #expect((await operation.finalOutcome.error as? RetryingOperationError)?.code == .expired)
        #expect(operation.startCount == 1)
        #expect(clock.pendingCount == 0)
    }

    @Test func aRunningAttemptMayFinishAfterTheExpirationButNotRetry() async {
        let clock = ManualRetryScheduler()
        let succeeding = ManuallyEndedOperation(clock: clock, policy: .default)
        succeeding.expirationDate = clock.now.addingTimeInterval(5)
        let retrying = ManuallyEndedOperation(clock: clock, policy: .default)
        retrying.expirationDate = clock.now.addingTimeInterval(5)
        succeeding.start()
        retrying.start()
        #expect(succeeding.waitForStart() && retrying.waitForStart())
        clock.advance(by: 6)
        // An attempt running at the expiration date is not interrupted and may succeed
        succeeding.end(attempt: 1, with: .succeeded)
        #expect(await succeeding.finalOutcome.isSuccess)
        // One that asks for a retry after it fails as expired instead of waiting
        retrying.end(attempt: 1, with: .retriableError(TestError("busy")))
        #expect((await retrying.finalOutcome.error as? RetryingOperationError)?.code == .expired)
        #expect(clock.pendingCount == 0)
    }

    @Test func anAsyncOperationExpiresDuringItsBackoff() async {
        let clock = ManualRetryScheduler()
        let operation = AsyncRetryingOperation(retryPolicy: .constant(60)) { _ in throw TestError("down") }
        operation.retryScheduler = clock
        operation.expirationDate = clock.now.addingTimeInterval(30)
        operation.start()
        await clock.waitForScheduledRetries(count: 2)
        clock.advance(by: 30)
        #expect((await operation.finalOutcome.error as? RetryingOperationError)?.code == .expired)
        #expect(operation.numberOfAttempts == 1)
    }
}

@Suite struct RetryPolicyTimeoutCodingTests {
    @Test func aPolicyEncodedBeforeTimeoutsDecodesWithoutOne() throws {
        let old = #"{"retryLimit":{"maximum":{"_0":3}},"backoff":{"constant":{"_0":2}},"maximumDelay":2,"jitter":"none"}"#
        let policy = try JSONDecoder().decode(RetryPolicy.self, from: Data(old.utf8))
        #expect(policy == .constant(2, retryLimit: .maximum(3)))
        #expect(policy.attemptTimeout == nil)
    }

    @Test func aTimeoutRoundTripsAndAnInvalidOneIsRejected() throws {
        let policy = RetryPolicy(attemptTimeout: 12.5)
        let decoded = try JSONDecoder().decode(RetryPolicy.self, from: JSONEncoder().encode(policy))
        #expect(decoded == policy)
        #expect(decoded.attemptTimeout == 12.5)
        let invalid = #"{"retryLimit":"unlimited","backoff":{"constant":{"_0":2}},"maximumDelay":2,"jitter":"none","attemptTimeout":0}"#
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(RetryPolicy.self, from: Data(invalid.utf8)) }
    }
}

/// A synchronous operation whose first attempt blocks until its cancel hook runs, then reports
/// success; the next attempts succeed at once.
final class BlockingSynchronousOperation: RetryingOperation, @unchecked Sendable {
    let firstAttemptBlocked = DispatchSemaphore(value: 0)
    private let unblock = DispatchSemaphore(value: 0)
    let hookCalls = LockedBox(0)

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        if numberOfAttempts == 1 {
            firstAttemptBlocked.signal()
            unblock.wait()
        }
        baseOperationEnded()
    }

    override func cancelBaseOperation() {
        hookCalls.withLock { $0 += 1 }
        unblock.signal()
    }
}

/// A download whose run hangs until cancelled (`hangs`), or finishes at once.
final class HangingDownload: Operation, RetryableOperation, @unchecked Sendable {
    let hangs: Bool
    private let state = LockedBox((executing: false, finished: false))
    init(hangs: Bool) { self.hangs = hangs }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { state.withLock { $0.executing } }
    override var isFinished: Bool { state.withLock { $0.finished } }

    override func start() {
        willChangeValue(forKey: "isExecuting")
        state.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        if !hangs || isCancelled { finish() }
    }

    override func cancel() {
        super.cancel()
        if state.withLock({ $0.executing && !$0.finished }) { finish() }
    }

    private func finish() {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        let first = state.withLock { state -> Bool in
            guard !state.finished else { return false }
            state.finished = true
            state.executing = false
            return true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
        _ = first
    }

    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? {
        isCancelled ? [] : nil
    }

    func operationForRetrying() throws -> HangingDownload { HangingDownload(hangs: false) }
}

/// A one-shot gate tasks await.
actor AsyncGate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters = []
    }
    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }
}

/// A fetcher whose first `hangs` fetches never call back; later ones succeed.
final class FakeFetcher: @unchecked Sendable {
    // @unchecked: `calls` and `cancels` are only touched while `lock` is held.
    private let lock = NSLock()
    private var calls = 0
    private(set) var cancels = 0
    private let hangs: Int
    init(hangs: Int) { self.hangs = hangs }

    func fetch(completion: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        lock.lock()
        calls += 1
        let hangs = calls <= self.hangs
        lock.unlock()
        if !hangs { DispatchQueue.global().async { completion(.success(Data())) } }
    }

    func cancel() {
        lock.lock()
        cancels += 1
        lock.unlock()
    }
}

// snippet: attempt-timeout
final class FetchOperation: RetryingOperation, @unchecked Sendable {
    let fetcher: FakeFetcher

    init(fetcher: FakeFetcher) {
        self.fetcher = fetcher
        super.init()
        // A fetch that has not called back after 30 s is abandoned and retried 2 s later.
        retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(2), jitter: .none, attemptTimeout: 30)
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts   // so that a late callback cannot end a later attempt
        fetcher.fetch { result in
            switch result {
            case .success: self.baseOperationEnded(attempt: attempt, with: .succeeded)
            case .failure(let error): self.baseOperationEnded(attempt: attempt, with: .retriableError(error))
            }
        }
    }

    // Called on cancel, and (through `abandonBaseOperation`) when an attempt times out.
    override func cancelBaseOperation() { fetcher.cancel() }
}
// end snippet

@Suite(.timeLimit(.minutes(1)))
struct DeadlineDocumentationTests {
    @Test func theReadmesFetchOperationRetriesAHungFetch() async {
        let fetcher = FakeFetcher(hangs: 1)
        let clock = ManualRetryScheduler()
        // snippet: attempt-timeout-use
        let fetch = FetchOperation(fetcher: fetcher)
        fetch.retryScheduler = clock                                  // the test clock
        fetch.expirationDate = clock.now.addingTimeInterval(3600)     // give up after an hour
        fetch.start()
        // end snippet
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 30)    // the first fetch never called back: abandoned
        clock.advance(by: 2)     // the retry
        #expect(await fetch.finalOutcome.isSuccess)
        #expect(fetch.numberOfAttempts == 2)
        #expect(fetcher.cancels == 1)
    }
}

/// A retry helper that writes its setup and teardown into the operation's event log.
private struct LoggingRetryHelper: RetryHelper {
    let name: String
    let events: EventLog
    func setup() { events.append("setup \(name)") }
    func teardown() { events.append("teardown \(name)") }
}

@Suite(.timeLimit(.minutes(1)))
struct AttemptNumberedRetryHelperTests {
    @Test func anAttemptEndedByNumberWithHelpersWaitsForThemWithoutSpendingARetry() async {
        // Given an operation allowed no counted retry, whose first attempt is running
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(0)))
        operation.start()
        #expect(operation.waitForStart())

        // When the attempt ends by number with a helper, uncounted
        operation.baseOperationEnded(attempt: 1, retryHelpers: [LoggingRetryHelper(name: "network", events: operation.events)], countsTowardRetryLimit: false)

        // Then the operation waits for the helper, with no retry spent and no timer
        #expect(operation.isWaitingToRetry)
        #expect(operation.events.all == ["start 1", "setup network"])
        #expect(operation.numberOfRetries == 0)
        #expect(clock.pendingCount == 0)

        // And when the helper's condition comes, the helper is torn down and the next attempt runs
        operation.retryNow()
        #expect(operation.waitForStart())
        #expect(operation.events.all == ["start 1", "setup network", "teardown network", "start 2"])
        #expect(operation.numberOfRetries == 0)
        operation.end(attempt: 2, with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
    }

    @Test func aCountedEndWithHelpersIsLimitedByThePolicy() async {
        // Given an operation allowed one counted retry
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(1)))
        operation.start()
        #expect(operation.waitForStart())

        // When its first attempt ends with a helper, counted, and the helper lets it retry
        operation.baseOperationEnded(attempt: 1, retryHelpers: [LoggingRetryHelper(name: "first", events: operation.events)], countsTowardRetryLimit: true)
        operation.retryNow()
        #expect(operation.waitForStart())
        #expect(operation.numberOfRetries == 1)

        // And its second attempt ends the same way
        operation.baseOperationEnded(attempt: 2, retryHelpers: [LoggingRetryHelper(name: "second", events: operation.events)], countsTowardRetryLimit: true)

        // Then the policy ends it: the retry limit is reached, and the second helper is never set up
        #expect((await operation.finalOutcome.error as? RetryingOperationError)?.code == .retryLimitReached)
        #expect(operation.events.all == ["start 1", "setup first", "teardown first", "start 2"])
    }

    @Test func aLateEndWithHelpersFromAnAbandonedAttemptIsIgnoredAndSetsNothingUp() async {
        // Given an attempt abandoned at its 10 s timeout, and the second attempt running
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(3), backoff: .constant(1), jitter: .none, attemptTimeout: 10))
        operation.start()
        #expect(operation.waitForStart())
        clock.advance(by: 10)
        clock.advance(by: 1)
        #expect(operation.waitForStart())

        // When the first attempt's callback comes late, asking to wait for a helper
        operation.baseOperationEnded(attempt: 1, retryHelpers: [LoggingRetryHelper(name: "late", events: operation.events)], countsTowardRetryLimit: false)

        // Then it is ignored: the second attempt still runs, and the helper was never set up
        #expect(operation.isExecuting && !operation.isWaitingToRetry)
        #expect(!operation.events.all.contains("setup late"))
        operation.end(attempt: 2, with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
    }
}
