/*:
 [Previous](@previous)

 # An async body

 With async/await there is no subclass to write. An `AsyncRetryingOperation` runs an
 `async throws` closure — one attempt — and retries it by its policy:

 - returning ends the operation successfully;
 - throwing lets the policy decide, unless `isRetriable` says the error is final;
 - throwing a `RetryRequest` chooses the wait yourself, counted or not.

 Each attempt runs in a new `Task`, and cancelling the operation cancels that task.
 */
import Foundation
import RetryingOperation

enum WeatherError: Error {
    case offline
    case timedOut
    case unknownCity
}

/// A stand-in for a weather service: answers with `answers`, one per request; the last one repeats.
actor FakeWeatherService {
    private var answers: [Result<Int, WeatherError>]

    init(answers: [Result<Int, WeatherError>]) {
        self.answers = answers
    }

    func temperature(in city: String) async throws -> Int {
        try await Task.sleep(for: .milliseconds(5))   // the network
        let answer = answers.count > 1 ? answers.removeFirst() : answers[0]
        return try answer.get()
    }
}

/// Where an attempt leaves its result for the page to read: any thread may use it.
final class Reading: @unchecked Sendable {
    // @unchecked: `stored` is only touched while `lock` is held.
    private let lock = NSLock()
    private var stored: Int?

    var value: Int? {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }
}

/*:
 ## Retrying a closure

 The body receives an `Attempt`: its number (1 for the first, uncounted retries included)
 and the counted retries so far. Being offline is not a failure of the request, so the body
 asks for an uncounted retry; a time-out is an ordinary error, for the policy to judge.
 */
let queue = OperationQueue()
let lisbon = FakeWeatherService(answers: [.failure(.offline), .failure(.timedOut), .success(21)])
let reading = Reading()

print("Offline, then a time-out:")
let fetch = AsyncRetryingOperation(retryPolicy: .constant(0.02, retryLimit: .maximum(1))) { attempt in
    print("  attempt \(attempt.number) (counted retries so far: \(attempt.numberOfRetries))")
    do {
        reading.value = try await lisbon.temperature(in: "Lisbon")
    } catch WeatherError.offline {
        throw RetryRequest.after(0.02, countsTowardRetryLimit: false)   // wait; don't spend a retry
    }
}
queue.addOperation(fetch)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(fetch.outcome!), attempts: \(fetch.numberOfAttempts), temperature: \(reading.value ?? 0)")
precondition(fetch.outcome?.isSuccess == true)
precondition(fetch.numberOfAttempts == 3)
precondition(reading.value == 21)

/*:
 This page blocks until the queue is done, which a playground may do. In async code, await
 the outcome instead; that blocks no thread:

 ```swift
 queue.addOperation(fetch)
 switch await fetch.finalOutcome {
 case .succeeded: print("done")
 case .failed(let error): print("gave up: \(error)")
 case .cancelled: break
 }
 ```

 ## Errors that are final

 `isRetriable` sorts thrown errors: `false` fails the operation at once with that error.
 */
print("An unknown city:")
let atlantis = FakeWeatherService(answers: [.failure(.unknownCity)])
let lookup = AsyncRetryingOperation(isRetriable: { $0 as? WeatherError != .unknownCity }) { _ in
    _ = try await atlantis.temperature(in: "Atlantis")
}
queue.addOperation(lookup)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(lookup.outcome!), attempts: \(lookup.numberOfAttempts)")
precondition(lookup.outcome?.error as? WeatherError == .unknownCity)
precondition(lookup.numberOfAttempts == 1)

/*:
 ## Cancelling

 Cancelling the operation cancels the task of the running attempt: here it interrupts a
 one-minute sleep, and the operation finishes as `.cancelled` right away.
 */
print("Cancelled during an attempt:")
let started = DispatchSemaphore(value: 0)
let slow = AsyncRetryingOperation { _ in
    started.signal()
    try await Task.sleep(for: .seconds(60))
}
queue.addOperation(slow)
started.wait()
let cancelledAt = Date()
slow.cancel()
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(slow.outcome!), attempts: \(slow.numberOfAttempts)")
precondition("\(slow.outcome!)" == "cancelled")
precondition(Date().timeIntervalSince(cancelledAt) < 30)

//: [Next](@next)
