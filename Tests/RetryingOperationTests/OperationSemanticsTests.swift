import Foundation
import Testing
@testable import RetryingOperation

/// What an `OperationQueue` user relies on from any `Operation`, checked for retrying
/// operations beside a plain `Operation` doing the same: a cancelled operation never runs, a
/// synchronous `start()` by hand returns finished, attempts run where the queue runs its
/// operations, and `OperationQueue.progress` counts them. The main thread's share is in
/// `MainThreadSemanticsTests`.
@Suite(.timeLimit(.minutes(1)))
struct OperationSemanticsTests {
    // MARK: Cancellation that makes an operation ready

    @Test(arguments: [false, true])
    func aDependentCancelledWhileItsPrerequisiteNeverRunsNeverStartsAnAttempt(asynchronous: Bool) async {
        // Given a dependent whose prerequisite never runs, in a queue beside an operation whose
        // readiness check stalls the thread that asks (so the thread that cancels stalls after
        // the cancel made the dependent ready, and the queue starts it meanwhile)
        let queue = makeQueue()
        let staller = StallingReadinessOperation()
        queue.addOperation(staller)
        let dependent = ThreadRecordingOperation(asynchronous: asynchronous, steps: [.succeed])
        dependent.addDependency(BlockOperation {})
        queue.addOperation(dependent)

        // When the dependent is cancelled (on a thread of its own, which the readiness check
        // stalls: not one of the few the tests share)
        await onDedicatedThread {
            staller.stalls(true)
            dependent.cancel()
            staller.stalls(false)
        }
        staller.release()
        await drain(queue)

        // Then it never started an attempt, and finished cancelled
        #expect(dependent.attemptCount == 0)
        #expect(dependent.outcome.map(isCancelled) == true)
    }

    @Test
    func aPlainDependentCancelledWhileItsPrerequisiteNeverRunsNeverRuns() async {
        // The same with a plain operation: its block never runs
        let queue = makeQueue()
        let staller = StallingReadinessOperation()
        queue.addOperation(staller)
        let ran = LockedBox(false)
        let dependent = BlockOperation { ran.withLock { $0 = true } }
        dependent.addDependency(BlockOperation {})
        queue.addOperation(dependent)

        await onDedicatedThread {
            staller.stalls(true)
            dependent.cancel()
            staller.stalls(false)
        }
        staller.release()
        await drain(queue)

        #expect(!ran.withLock { $0 })
        #expect(dependent.isFinished)
    }

    @Test(arguments: [false, true])
    func dependentsCancelledFromTwoThreadsNeverStartAnAttempt(asynchronous: Bool) async {
        // Given 1,000 dependents whose prerequisite is never added to any queue
        let queue = makeQueue()
        let operations = (0..<1_000).map { _ in
            let dependent = ThreadRecordingOperation(asynchronous: asynchronous, steps: [.succeed])
            dependent.addDependency(BlockOperation {})
            return dependent
        }
        // When each is added and cancelled at once, from two threads
        DispatchQueue.concurrentPerform(iterations: 2) { half in
            for dependent in operations[(half * 500)..<(half * 500 + 500)] {
                queue.addOperation(dependent)
                dependent.cancel()
            }
        }
        await drain(queue)

        // Then none started an attempt, and each finished cancelled
        #expect(operations.map(\.attemptCount).reduce(0, +) == 0)
        #expect(operations.allSatisfy { $0.outcome.map(isCancelled) == true })
    }

    // MARK: start() by hand

    @Test
    func aSynchronousOperationStartedByHandOnAnyThreadRunsEveryAttemptThere() async {
        // Given a synchronous operation that retries twice, started by hand on a thread of its own
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.005), .retryIn(0.005), .succeed])
        let (finishedInsideStart, starter) = await onDedicatedThread { () -> (Bool, ObjectIdentifier) in
            operation.start()
            return (operation.isFinished, ObjectIdentifier(Thread.current))
        }
        // Then start() returned finished, and all three attempts ran on that thread
        #expect(finishedInsideStart)
        #expect(operation.attemptThreadIdentifiers == [starter, starter, starter])
    }

    @Test
    func cancellingASynchronousOperationStartedByHandWhileItWaitsEndsItsStart() async {
        // Given a synchronous operation started by hand that waits for a retry no timer ends
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.waitForManualRetry])
        let returned = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            operation.start()
            returned.signal()
        }
        #expect(await onDedicatedThread { operation.attemptStarted.wait(seconds: 10) })
        // When it is cancelled, its start() returns, the operation finished cancelled
        operation.cancel()
        #expect(await onDedicatedThread { returned.wait(seconds: 10) })
        #expect(operation.outcome.map(isCancelled) == true)
    }

    // MARK: Where attempts run

    @Test
    func retriesOfASynchronousOperationRunOnTheQueuesUnderlyingQueue() async {
        // Given a queue that runs its operations on a serial dispatch queue of ours
        let key = DispatchSpecificKey<String>()
        let underlying = DispatchQueue(label: "underlying")
        underlying.setSpecific(key: key, value: "underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.005), .retryIn(0), .succeed], specificKey: key)
        let plainRanThere = LockedBox(false)
        let plain = BlockOperation { plainRanThere.withLock { $0 = DispatchQueue.getSpecific(key: key) == "underlying" } }

        // When the queue runs them
        queue.addOperation(operation)
        queue.addOperation(plain)
        let outcome = await operation.finalOutcome
        await drain(queue)

        // Then every attempt started there, as the plain operation ran there
        #expect(outcome.isSuccess)
        #expect(operation.attemptSpecifics == ["underlying", "underlying", "underlying"])
        #expect(plainRanThere.withLock { $0 })
    }

    @Test
    func aRetryWaitOnTheUnderlyingQueueDoesNotBlockIt() async {
        // Given a serial underlying queue and an operation waiting 0.2 s for its retry
        let underlying = DispatchQueue(label: "underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(0.2), .succeed])
        queue.addOperation(operation)
        // (A short wait where it stands: the attempt runs on that queue's own thread, not one of
        // the shared pool, and the work below must be queued within the 0.2 s.)
        #expect(operation.attemptStarted.wait(seconds: 10))
        // When other work is put on that queue during the wait, it runs before the retry
        let ranDuringWait = await withCheckedContinuation { continuation in
            underlying.async { continuation.resume(returning: operation.attemptCount == 1) }
        }
        #expect(ranDuringWait)
        #expect(await operation.finalOutcome.isSuccess)
    }

    // MARK: OperationQueue.progress

    @Test
    func operationQueueProgressCountsSynchronousRetryingOperationsAsPlainOnes() async {
        // Given two queues reporting progress for 10 operations each: retrying ones that retry
        // once, and plain synchronous ones, run one at a time. (On Linux, plain operations
        // running at once corrupt their queue's progress: swift-corelibs-foundation's
        // `OperationQueue._execute(_:)` (Operation.swift) calls `progress.addChild(_:)` and,
        // after `main()`, `resignCurrent()` on each worker thread, and `Progress`
        // (Progress.swift: `_updateChild`, `_updateFractionCompleted`) takes no lock. This
        // test's concurrent plain queue once counted 9 of 10, and once crashed a full run in
        // `Progress._updateFractionCompleted`, with no retrying operation involved.)
        let retrying = makeQueue()
        retrying.progress.totalUnitCount = 10
        let plain = makeQueue(maxConcurrent: 1)
        plain.progress.totalUnitCount = 10
        let clock = ManualRetryScheduler()
        let operations = (0..<10).map { _ in
            ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(1), .succeed], scheduler: clock)
        }

        // When they have run
        operations.forEach(retrying.addOperation)
        for _ in 0..<10 { plain.addOperation(BlockOperation {}) }
        await clock.waitForScheduledRetries(count: 10)
        // (nothing is complete while the retries wait)
        #expect(retrying.progress.completedUnitCount == 0)
        clock.advance(by: 1)
        await drain(retrying)
        await drain(plain)

        // Then both queues report all 10 complete
        #expect(plain.progress.completedUnitCount == 10)
        #expect(retrying.progress.completedUnitCount == 10)
        #expect(retrying.progress.fractionCompleted == 1)
    }

    @Test
    func operationQueueProgressCountsRetryingOperationsFinishingAtOnceOnTwoThreads() async {
        // Linux's `Progress` has no lock: finishes counted at the same moment on two threads
        // must still update the queue's progress one at a time. Two threads meet most often
        // just as they set off, so the scene is short and played 500 times. The race is only
        // caught when the two threads really run at once: without the lock this test failed
        // (mostly crashing) in every run with two idle cores, far less often when another
        // process kept a core busy.
        let rounds = 500
        var counts: [(completed: Int64, fraction: Double)] = []
        for _ in 0..<rounds {
            // Given a reporting queue whose 4 synchronous operations all wait for a retry
            let queue = makeQueue()
            queue.progress.totalUnitCount = 4
            let clock = ManualRetryScheduler()
            let operations = (0..<4).map { _ in
                ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(1), .succeed], scheduler: clock)
            }
            operations.forEach(queue.addOperation)
            await clock.waitForScheduledRetries(count: 4)

            // When they all finish at once, cancelled from two threads
            DispatchQueue.concurrentPerform(iterations: 2) { half in
                operations[half * 2].cancel()
                operations[half * 2 + 1].cancel()
            }
            await drain(queue)
            #expect(operations.allSatisfy { $0.outcome.map(isCancelled) == true })
            counts.append((queue.progress.completedUnitCount, queue.progress.fractionCompleted))
        }

        // Then every time, the queue counted each operation once
        #expect(counts.map(\.completed) == Array(repeating: 4, count: rounds))
        #expect(counts.map(\.fraction) == Array(repeating: 1, count: rounds))
    }

    @Test
    func operationQueueProgressCountsARetryingOperationFinishedWhereAnotherProgressIsCurrent() async {
        // Given a reporting queue whose synchronous operation waits for a retry
        let queue = makeQueue()
        queue.progress.totalUnitCount = 1
        let clock = ManualRetryScheduler()
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.retryIn(1), .succeed], scheduler: clock)
        queue.addOperation(operation)
        await clock.waitForScheduledRetries(count: 1)

        // When it is cancelled (and so finishes) inside a plain operation of another reporting
        // queue, where that operation's own progress is the thread's current one
        let other = makeQueue()
        other.progress.totalUnitCount = 1
        other.addOperation(BlockOperation { operation.cancel() })
        await drain(other)
        await drain(queue)

        // Then each queue counted its own operation, once
        #expect(operation.outcome.map(isCancelled) == true)
        #expect(queue.progress.completedUnitCount == 1)
        #expect(other.progress.completedUnitCount == 1)
    }

    @Test
    func operationQueueProgressIsUntouchedWhenNotReporting() async {
        // Given a queue whose progress has no total (not reporting, as by default)
        let queue = makeQueue()
        let operation = ThreadRecordingOperation(asynchronous: false, steps: [.succeed])
        queue.addOperation(operation)
        await drain(queue)
        // Then its progress counted nothing, as for plain operations
        #expect(queue.progress.completedUnitCount == 0)
        #expect(queue.progress.totalUnitCount == 0)
    }
}

/// A plain operation that is not ready until ``release()``, and whose readiness check, while
/// ``stalls(_:)`` is on, holds the asking thread for 50 ms. Linux's `OperationQueue` asks it on
/// the thread that made another operation ready (by cancelling it), right after it has handed
/// that operation to a worker thread: the cancelling thread stalls inside `cancel()` there.
private final class StallingReadinessOperation: Operation, @unchecked Sendable {
    // @unchecked: the flags are in a `LockedBox`.
    private let flags = LockedBox((stalls: false, released: false))

    func stalls(_ on: Bool) { flags.withLock { $0.stalls = on } }

    func release() {
        flags.withLock { $0.released = true }
        willChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isReady")
    }

    override var isReady: Bool {
        let (stalls, released) = flags.withLock { ($0.stalls, $0.released) }
        if stalls { Thread.sleep(forTimeInterval: 0.05) }
        return released && super.isReady
    }
}

private func isCancelled(_ outcome: RetryingOperation.Outcome) -> Bool {
    if case .cancelled = outcome { return true }
    return false
}

/// A `RetryingOperation` following a script of steps that records, for each attempt, the
/// thread it started on and the value of a dispatch-specific key there.
final class ThreadRecordingOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: mutable state is in `LockedBox`es.
    enum ThreadKind: Equatable, Sendable { case main, other }

    let asynchronous: Bool
    let steps: [Step]
    let specificKey: DispatchSpecificKey<String>?
    let attemptStarted = DispatchSemaphore(value: 0)
    private let records = LockedBox<[(kind: ThreadKind, thread: ObjectIdentifier, specific: String?)]>([])

    init(asynchronous: Bool, steps: [Step], scheduler: (any RetryScheduler)? = nil, specificKey: DispatchSpecificKey<String>? = nil) {
        self.asynchronous = asynchronous
        self.steps = steps
        self.specificKey = specificKey
        super.init()
        if let scheduler { retryScheduler = scheduler }
    }

    override var isAsynchronous: Bool { asynchronous }

    var attemptCount: Int { records.withLock { $0.count } }
    var attemptThreads: [ThreadKind] { records.withLock { $0.map(\.kind) } }
    var attemptThreadIdentifiers: [ObjectIdentifier] { records.withLock { $0.map(\.thread) } }
    var attemptSpecifics: [String?] { records.withLock { $0.map(\.specific) } }

    override func startBaseOperation(isRetry: Bool) {
        let specific = specificKey.flatMap { DispatchQueue.getSpecific(key: $0) }
        let index = records.withLock { records -> Int in
            records.append((Thread.isMainThread ? .main : .other, ObjectIdentifier(Thread.current), specific))
            return records.count - 1
        }
        attemptStarted.signal()
        let step = steps[min(index, steps.count - 1)]
        if asynchronous {
            DispatchQueue.global().async { self.end(with: step) }
        } else {
            end(with: step)
        }
    }

    private func end(with step: Step) {
        switch step {
        case .succeed: baseOperationEnded()
        case .retryIn(let delay): baseOperationEnded(needsRetryIn: delay)
        case .waitForManualRetry: baseOperationEnded(retryHelpers: [])
        default: baseOperationEnded(failingWith: TestError("step not supported here"))
        }
    }
}
