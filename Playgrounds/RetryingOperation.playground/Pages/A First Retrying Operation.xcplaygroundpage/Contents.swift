/*:
 # A first retrying operation

 `RetryingOperation` is an abstract `Operation` that retries its work. You subclass it and
 describe **one attempt**; the class starts attempts until one succeeds or it gives up,
 waits between them, handles cancellation, and keeps `isExecuting` / `isFinished` up to date
 so that any `OperationQueue` runs it correctly.

 This page fetches a greeting from a server that is too busy to answer the first two times.
 */
import Foundation
import RetryingOperation

//: A stand-in for a network service. It calls back on another thread, as a real client would.
enum GreetingError: Error {
    case busy       // worth trying again later
    case notFound   // trying again will not help
}

final class FakeGreetingServer: @unchecked Sendable {
    // @unchecked: `answers` is only touched while `lock` is held.
    private let lock = NSLock()
    private var answers: [Result<String, GreetingError>]

    /// Answers with `answers`, one per request; the last one repeats.
    init(answers: [Result<String, GreetingError>]) {
        self.answers = answers
    }

    func fetchGreeting(completion: @escaping @Sendable (Result<String, GreetingError>) -> Void) {
        lock.lock()
        let answer = answers.count > 1 ? answers.removeFirst() : answers[0]
        lock.unlock()
        DispatchQueue.global().async { completion(answer) }
    }
}

/*:
 ## Subclassing

 A subclass provides three things:

 1. `isAsynchronous` — `true` when an attempt ends *after* `startBaseOperation(isRetry:)`
    returns (here: in a completion handler), `false` when it ends before. There is no default.
 2. `startBaseOperation(isRetry:)` — one attempt.
 3. Exactly one `baseOperationEnded…` call per attempt, from any thread, saying how it went:
    - `baseOperationEnded()`: success, the operation finishes;
    - `baseOperationEnded(withRetriableError:)`: the error may go away, the retry policy
      decides whether and when to retry;
    - `baseOperationEnded(failingWith:)`: the error is final, no retry.
 */
final class FetchGreetingOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `greeting` is written before the attempt ends with `baseOperationEnded()`
    // and read only after the operation finished; the operation orders the two.
    let server: FakeGreetingServer
    private(set) var greeting: String?

    init(server: FakeGreetingServer) {
        self.server = server
        super.init()
        // At most three retries, 50 ms apart: short waits keep this page quick.
        retryPolicy = .constant(0.05, retryLimit: .maximum(3))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        print(isRetry ? "  retry \(numberOfRetries ?? 0)" : "  first attempt")
        server.fetchGreeting { result in
            switch result {
            case .success(let greeting):
                self.greeting = greeting
                self.baseOperationEnded()
            case .failure(.busy):
                self.baseOperationEnded(withRetriableError: GreetingError.busy)
            case .failure(let error):
                self.baseOperationEnded(failingWith: error)
            }
        }
    }
}

/*:
 ## Running it

 Add it to a queue like any other operation. A playground may block until the queue is
 done; in an app, `await operation.finalOutcome` waits without blocking a thread.
 */
let queue = OperationQueue()

print("A busy server:")
let fetch = FetchGreetingOperation(server: FakeGreetingServer(answers: [.failure(.busy), .failure(.busy), .success("Hello!")]))
queue.addOperation(fetch)
queue.waitUntilAllOperationsAreFinished()

//: Once finished, `outcome` says how it ended, and `numberOfAttempts` how many attempts it took.
print("outcome: \(fetch.outcome!), attempts: \(fetch.numberOfAttempts), greeting: \(fetch.greeting ?? "none")")
precondition(fetch.outcome?.isSuccess == true)
precondition(fetch.numberOfAttempts == 3)
precondition(fetch.greeting == "Hello!")
//: `numberOfRetries` is only meaningful while the operation runs; it is `nil` before and after.
precondition(fetch.numberOfRetries == nil)

/*:
 ## Giving up

 A final error ends the operation at once; the error is in the outcome.
 */
print("A missing greeting:")
let missing = FetchGreetingOperation(server: FakeGreetingServer(answers: [.failure(.notFound)]))
queue.addOperation(missing)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(missing.outcome!), attempts: \(missing.numberOfAttempts)")
precondition(missing.outcome?.error as? GreetingError == .notFound)
precondition(missing.numberOfAttempts == 1)

//: A retriable error stops being retried when the policy's limit is reached: one attempt plus three retries. The outcome is then a `RetryingOperationError` with code `retryLimitReached`, carrying the last attempt's error — the shape every kind of retrying operation gives up in.
print("A server that stays busy:")
let overloaded = FetchGreetingOperation(server: FakeGreetingServer(answers: [.failure(.busy)]))
queue.addOperation(overloaded)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(overloaded.outcome!), attempts: \(overloaded.numberOfAttempts)")
let gaveUp = overloaded.outcome?.error as? RetryingOperationError
precondition(gaveUp?.code == .retryLimitReached && gaveUp?.underlyingError as? GreetingError == .busy)
precondition(overloaded.numberOfAttempts == 4)

/*:
 ## Cancelling

 A cancelled operation is never retried, and its outcome is `.cancelled`. Here it is
 cancelled before it starts, so no attempt runs at all. Cancelling during a wait between
 attempts ends the wait at once (see *Testing Retry Logic*).
 */
print("Cancelled before it starts:")
let cancelled = FetchGreetingOperation(server: FakeGreetingServer(answers: [.success("Hi")]))
cancelled.cancel()
queue.addOperation(cancelled)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(cancelled.outcome!), attempts: \(cancelled.numberOfAttempts)")
precondition("\(cancelled.outcome!)" == "cancelled")
precondition(cancelled.numberOfAttempts == 0)

/*:
 ## Synchronous attempts

 When the work is synchronous, say so: the attempt must then end before
 `startBaseOperation(isRetry:)` returns. Waiting between attempts still never blocks a
 thread — the next attempt starts from a timer.
 */
struct DiskFull: Error {}

final class WriteReportOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `failuresLeft` is only used by attempts, which never overlap.
    private var failuresLeft = 1

    override init() {
        super.init()
        retryPolicy = .constant(0.05, retryLimit: .maximum(2))
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        if failuresLeft > 0 {
            failuresLeft -= 1
            baseOperationEnded(withRetriableError: DiskFull())
        } else {
            baseOperationEnded()
        }
    }
}

print("A synchronous operation:")
let write = WriteReportOperation()
queue.addOperation(write)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(write.outcome!), attempts: \(write.numberOfAttempts)")
precondition(write.outcome?.isSuccess == true && write.numberOfAttempts == 2)

//: [Next](@next)
