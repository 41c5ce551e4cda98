/*:
 [Previous](@previous)

 # Policies and backoff

 When an attempt ends with `baseOperationEnded(withRetriableError:)`, the operation's
 `retryPolicy` decides two things: whether one more retry is allowed, and how long to wait
 before it. A `RetryPolicy` is a plain value — `Codable`, `Hashable` and `Sendable` — so
 you can share it, compare it and store it.
 */
import Foundation
import RetryingOperation

/*:
 ## Limits and delays

 The limit counts *retries*, not attempts: five retries means at most six attempts. The
 base delay before retry *n* (1 for the first retry) follows the backoff and is capped by
 `maximumDelay`.
 */
let policy = RetryPolicy(
    retryLimit: .maximum(5),
    backoff: .exponential(initial: 0.5, multiplier: 2),
    maximumDelay: 3,
    jitter: .none
)
precondition(policy.allowsRetry(afterRetries: 4))
precondition(!policy.allowsRetry(afterRetries: 5))

let exponentialDelays = (1...5).map { policy.baseDelay(forRetry: $0) }
print("exponential from 0.5 s, capped at 3 s:", exponentialDelays)
precondition(exponentialDelays == [0.5, 1, 2, 3, 3])

let linear = RetryPolicy(backoff: .linear(initial: 1, increment: 2), jitter: .none)
let linearDelays = (1...3).map { linear.baseDelay(forRetry: $0) }
print("linear from 1 s, 2 s more each time:", linearDelays)
precondition(linearDelays == [1, 3, 5])

//: `.unlimited` retries for as long as it takes — there is no `-1` meaning "forever".
precondition(RetryPolicy(retryLimit: .unlimited).allowsRetry(afterRetries: 1_000_000))

/*:
 ## Defaults and presets

 Every parameter you leave out takes a named default: ten retries, exponential backoff from
 1 s, at most five minutes apart, with full jitter. Presets cover the common cases.
 */
let defaults = RetryPolicy()
precondition(defaults == .default)
precondition(defaults.retryLimit == RetryPolicy.defaultRetryLimit)
precondition(defaults.backoff == RetryPolicy.defaultBackoff)
precondition(defaults.maximumDelay == RetryPolicy.defaultMaximumDelay)
precondition(defaults.jitter == RetryPolicy.defaultJitter)
print("default:", defaults.retryLimit, defaults.backoff, defaults.maximumDelay, defaults.jitter)

precondition(!RetryPolicy.never.allowsRetry(afterRetries: 0))        // fail on the first error
precondition(RetryPolicy.interactive.retryLimit == .maximum(3))       // a user is waiting
precondition(RetryPolicy.persistent.retryLimit == .unlimited)         // background work that must happen
let everyTwoSeconds = RetryPolicy.constant(2, retryLimit: .maximum(3))
precondition(everyTwoSeconds.delay(forRetry: 3) == 2)                 // `.constant` has no jitter

/*:
 ## Jitter

 When a server comes back, thousands of clients retrying on the same schedule knock it over
 again. Jitter spreads their retries: `.full` picks a delay between 0 and the base delay,
 `.equal` between half the base delay and all of it.

 The delays are random; pass your own generator to `delay(forRetry:using:)` to make them
 reproducible, for example in tests.
 */
/// A small seeded generator (SplitMix64): the same seed gives the same delays.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

let full = RetryPolicy(backoff: .constant(4), jitter: .full)
let equal = RetryPolicy(backoff: .constant(4), jitter: .equal)
var generator = SeededGenerator(state: 42)
let fullDelays = (1...5).map { full.delay(forRetry: $0, using: &generator) }
let equalDelays = (1...5).map { equal.delay(forRetry: $0, using: &generator) }
print("full jitter of 4 s:", fullDelays.map { ($0 * 100).rounded() / 100 })
print("equal jitter of 4 s:", equalDelays.map { ($0 * 100).rounded() / 100 })
precondition(fullDelays.allSatisfy { (0...4).contains($0) })
precondition(equalDelays.allSatisfy { (2...4).contains($0) })

var sameSeed = SeededGenerator(state: 42)
precondition((1...5).map { full.delay(forRetry: $0, using: &sameSeed) } == fullDelays)

/*:
 ## Storing a policy

 A policy is `Codable`: keep it in settings or next to the work it applies to. Decoding
 checks it, so a stored policy can never be invalid.
 */
let encoder = JSONEncoder()
encoder.outputFormatting = .sortedKeys
let stored = try encoder.encode(policy)
print("stored:", String(decoding: stored, as: UTF8.self))
let restored = try JSONDecoder().decode(RetryPolicy.self, from: stored)
precondition(restored == policy)

/*:
 ## Retries that do not count

 Some failures are not the operation's fault: the device is offline, a lock is held, the
 server asked to come back later. Waiting for such a condition should not use up the retry
 budget. End the attempt with `countsTowardRetryLimit: false` — with a delay, or with retry
 helpers that trigger the retry when the condition changes — and the retry neither counts
 in `numberOfRetries` nor is refused by the policy.
 */
enum SyncProblem: Error {
    case offline
    case serverError
}

/// A stand-in for a sync service: answers with `answers`, one per call; the last one repeats.
final class FakeContactsService: @unchecked Sendable {
    // @unchecked: `answers` is only touched while `lock` is held.
    private let lock = NSLock()
    private var answers: [SyncProblem?]

    init(answers: [SyncProblem?]) {
        self.answers = answers
    }

    func sync() throws(SyncProblem) {
        lock.lock()
        let answer = answers.count > 1 ? answers.removeFirst() : answers[0]
        lock.unlock()
        if let answer { throw answer }
    }
}

final class SyncContactsOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `retriesSeen` is only touched by attempts, which never overlap, and read
    // after the operation finished.
    let service: FakeContactsService
    let offlineRetriesCount: Bool
    private(set) var retriesSeen: [Int] = []

    init(service: FakeContactsService, offlineRetriesCount: Bool) {
        self.service = service
        self.offlineRetriesCount = offlineRetriesCount
        super.init()
        retryPolicy = .constant(0.02, retryLimit: .maximum(1))
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        retriesSeen.append(numberOfRetries ?? 0)
        do {
            try service.sync()
            baseOperationEnded()
        } catch .offline {
            // Not the sync's fault: wait, but (normally) without spending a retry.
            baseOperationEnded(needsRetryIn: 0.02, countsTowardRetryLimit: offlineRetriesCount)
        } catch {
            baseOperationEnded(withRetriableError: error)
        }
    }
}

/*:
 The log handler shows each decision as it is made. Operations log nothing unless you give
 them a `RetryLogHandler`; there is no global logger to configure.
 */
let queue = OperationQueue()
let printLog = RetryLogHandler(minimumLevel: .info) { message in print("  [\(message.level)] \(message.text)") }

//: Offline three times, then a server error, then success: the one retry the policy allows is still there for the server error.
let patient = SyncContactsOperation(service: FakeContactsService(answers: [.offline, .offline, .offline, .serverError, nil]),
                                    offlineRetriesCount: false)
patient.logHandler = printLog
print("Offline retries do not count:")
queue.addOperation(patient)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(patient.outcome!), attempts: \(patient.numberOfAttempts), retries seen: \(patient.retriesSeen)")
precondition(patient.outcome?.isSuccess == true)
precondition(patient.retriesSeen == [0, 0, 0, 0, 1])

//: Had the offline waits counted, the budget would be gone after the first one.
let impatient = SyncContactsOperation(service: FakeContactsService(answers: [.offline, .offline, .offline, .serverError, nil]),
                                      offlineRetriesCount: true)
impatient.logHandler = printLog
print("Offline retries count:")
queue.addOperation(impatient)
queue.waitUntilAllOperationsAreFinished()
print("outcome: \(impatient.outcome!), attempts: \(impatient.numberOfAttempts)")
precondition((impatient.outcome?.error as? RetryingOperationError)?.code == .retryLimitReached)
precondition(impatient.numberOfAttempts == 2)

//: [Next](@next)
