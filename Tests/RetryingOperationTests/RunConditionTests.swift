import Foundation
import Testing
@testable import RetryingOperation

@Suite(.timeLimit(.minutes(1)))
struct RunConditionTests {
    @Test func aManualConditionTellsEachObserverOncePerChangeUntilCancelled() {
        let condition = ManualRunCondition()
        let calls = LockedBox(0)
        let observation = condition.observeChanges { calls.withLock { $0 += 1 } }
        condition.isSatisfied = true
        condition.isSatisfied = true      // no change: no call
        condition.isSatisfied = false
        #expect(calls.withLock { $0 } == 2)
        observation.cancel()
        #expect(condition.observerCount == 0)
        condition.isSatisfied = true
        #expect(calls.withLock { $0 } == 2)
    }

    @Test func anOperationWaitsForItsConditionWithoutSpendingARetryAndRetriesWhenItHolds() async {
        // Given an operation whose first attempt finds the condition unmet and waits for it,
        // uncounted
        let online = ManualRunCondition(isSatisfied: false)
        let operation = ConditionalOperation(condition: online)
        let log = LogCapture()
        operation.logHandler = log.handler
        operation.start()
        #expect(operation.started.wait(timeout: .now() + 10) == .success)
        #expect(log.waitForMessage(containing: "waiting for 1 retry helper", seconds: 10))
        #expect(operation.isWaitingToRetry)
        #expect(online.observerCount == 1)

        // When the condition turns true
        online.isSatisfied = true

        // Then the next attempt starts at once, the observation is gone, and no retry was spent
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
        #expect(online.observerCount == 0)
        #expect(operation.countedRetries.withLock { $0 } == [0, 0])
    }

    @Test func aConditionThatAlreadyHoldsEndsTheWaitAtOnce() async {
        let online = ManualRunCondition(isSatisfied: true)
        let operation = ConditionalOperation(condition: online, alwaysWaitFirst: true)
        operation.start()
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
    }

    @Test func aSynchronousOperationWaitsForItsConditionToo() async {
        let online = ManualRunCondition(isSatisfied: false)
        let operation = ConditionalOperation(condition: online, synchronous: true)
        let queue = OperationQueue()
        queue.addOperation(operation)
        #expect(await onDedicatedThread { operation.started.wait(timeout: .now() + 10) == .success })
        while !operation.isWaitingToRetry { try? await Task.sleep(for: .milliseconds(1)) }
        online.isSatisfied = true
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.numberOfAttempts == 2)
        #expect(operation.countedRetries.withLock { $0 } == [0, 0])
    }

    @Test func cancellingWhileWaitingForAConditionStopsObservingIt() async {
        let online = ManualRunCondition(isSatisfied: false)
        let operation = ConditionalOperation(condition: online)
        operation.start()
        #expect(operation.started.wait(timeout: .now() + 10) == .success)
        while !operation.isWaitingToRetry { try? await Task.sleep(for: .milliseconds(1)) }
        operation.cancel()
        let outcome = await operation.finalOutcome
        #expect(outcome.description == "cancelled")
        #expect(online.observerCount == 0)
    }
}

/// Waits for `condition` (uncounted) when it is unmet, or — `alwaysWaitFirst` — on its first
/// attempt whatever it says; succeeds otherwise.
final class ConditionalOperation: RetryingOperation, @unchecked Sendable {
    let condition: ManualRunCondition
    let alwaysWaitFirst: Bool
    let synchronous: Bool
    let started = DispatchSemaphore(value: 0)
    let countedRetries = LockedBox<[Int]>([])

    init(condition: ManualRunCondition, alwaysWaitFirst: Bool = false, synchronous: Bool = false) {
        self.condition = condition
        self.alwaysWaitFirst = alwaysWaitFirst
        self.synchronous = synchronous
        super.init()
    }

    override var isAsynchronous: Bool { !synchronous }

    override func startBaseOperation(isRetry: Bool) {
        countedRetries.withLock { $0.append(numberOfRetries ?? -1) }
        started.signal()
        if condition.isSatisfied && !(alwaysWaitFirst && !isRetry) {
            baseOperationEnded()
        } else {
            baseOperationEnded(retryHelpers: [RunConditionRetryHelper(condition: condition, retryingOperation: self)],
                               countsTowardRetryLimit: false)
        }
    }
}
