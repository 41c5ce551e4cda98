/*:
 [Previous](@previous)

 # Testing retry logic

 Retry logic is all about waiting; its tests should not be. A `ManualRetryScheduler` is a
 clock that moves only when you say so. Give it to the operation under test as its
 `retryScheduler`: the policy, the attempts and the limits behave exactly as in
 production, but a retry scheduled "in 4 seconds" runs the moment you move the clock 4
 seconds forward — on your thread, before `advance(by:)` returns.
 */
import Foundation
import RetryingOperation

struct GatewayTimeout: Error {}

/// A stand-in for a payment gateway: answers with `answers`, one per charge; the last one repeats.
final class FakePaymentGateway: @unchecked Sendable {
    // @unchecked: `answers` is only touched while `lock` is held.
    private let lock = NSLock()
    private var answers: [Result<Void, GatewayTimeout>]

    init(answers: [Result<Void, GatewayTimeout>]) {
        self.answers = answers
    }

    func charge(completion: @escaping @Sendable (Result<Void, GatewayTimeout>) -> Void) {
        lock.lock()
        let answer = answers.count > 1 ? answers.removeFirst() : answers[0]
        lock.unlock()
        DispatchQueue.global().async { completion(answer) }
    }
}

//: The operation under test: three retries, waiting 1, 2, then 4 seconds.
final class ChargeOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `gateway` is a constant.
    let gateway: FakePaymentGateway

    init(gateway: FakePaymentGateway) {
        self.gateway = gateway
        super.init()
        retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .exponential(initial: 1, multiplier: 2), jitter: .none)
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        gateway.charge { result in
            switch result {
            case .success: self.baseOperationEnded()
            case .failure(let error): self.baseOperationEnded(withRetriableError: error)
            }
        }
    }
}

/*:
 ## Stepping through the backoff

 The operation runs on a queue, so its attempts end on other threads.
 `waitForScheduledRetries(count:timeout:)` blocks until the operation has scheduled its
 next retry — no polling, no sleeping. (In an `async` test, use the `async` variant,
 `await clock.waitForScheduledRetries(count:)`.) `pendingDelays` shows how long each
 pending retry would wait.
 */
let queue = OperationQueue()
let realStart = Date()

print("A gateway that always times out:")
let clock = ManualRetryScheduler()
let charge = ChargeOperation(gateway: FakePaymentGateway(answers: [.failure(GatewayTimeout())]))
charge.retryScheduler = clock
queue.addOperation(charge)

for expectedDelay: TimeInterval in [1, 2, 4] {
    precondition(clock.waitForScheduledRetries(count: 1, timeout: 10))   // an attempt failed
    print("  retry scheduled in \(clock.pendingDelays[0]) s")
    precondition(clock.pendingDelays == [expectedDelay])
    precondition(charge.isWaitingToRetry)
    clock.advance(by: expectedDelay)                                     // the retry runs now
}
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(charge.outcome!), attempts: \(charge.numberOfAttempts)")
precondition((charge.outcome?.error as? RetryingOperationError)?.underlyingError is GatewayTimeout)
precondition(charge.numberOfAttempts == 4)

//: Seven seconds passed on the test clock; almost none passed for real.
let clockTime = clock.now.timeIntervalSinceReferenceDate
print("test clock: \(clockTime) s")
precondition(clockTime == 7)
precondition(Date().timeIntervalSince(realStart) < 7)

/*:
 ## Cancelling during a wait

 A cancel during a wait tears the retry helpers down — the pending timer disappears from
 the clock — and finishes the operation at once.
 */
print("Cancelled while waiting:")
let cancelClock = ManualRetryScheduler()
let cancelled = ChargeOperation(gateway: FakePaymentGateway(answers: [.failure(GatewayTimeout())]))
cancelled.retryScheduler = cancelClock
queue.addOperation(cancelled)
precondition(cancelClock.waitForScheduledRetries(count: 1, timeout: 10))
cancelled.cancel()
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(cancelled.outcome!), attempts: \(cancelled.numberOfAttempts), pending retries: \(cancelClock.pendingCount)")
precondition("\(cancelled.outcome!)" == "cancelled")
precondition(cancelClock.pendingCount == 0)

/*:
 ## Retrying now

 `retryNow()` ends a wait early — say, when the user taps "Try again". The test clock does
 not move at all.
 */
print("Retried by hand:")
let manualClock = ManualRetryScheduler()
let retried = ChargeOperation(gateway: FakePaymentGateway(answers: [.failure(GatewayTimeout()), .success(())]))
retried.retryScheduler = manualClock
queue.addOperation(retried)
precondition(manualClock.waitForScheduledRetries(count: 1, timeout: 10))
retried.retryNow()
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(retried.outcome!), attempts: \(retried.numberOfAttempts), test clock: \(manualClock.now.timeIntervalSinceReferenceDate) s")
precondition(retried.outcome?.isSuccess == true && retried.numberOfAttempts == 2)
precondition(manualClock.now.timeIntervalSinceReferenceDate == 0)

/*:
 ## In a test suite

 A test does the same, awaiting instead of blocking: `await clock.waitForScheduledRetries(count: 1)`,
 then `#expect(clock.pendingDelays == [1])`, then `clock.advance(by: 1)`. The documentation
 article *Testing retry logic with the test clock* shows a complete Swift Testing test.
 */

//: [Next](@next)
