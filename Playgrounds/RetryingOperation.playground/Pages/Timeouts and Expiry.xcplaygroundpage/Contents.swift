/*:
 [Previous](@previous)

 # Timeouts and expiry

 An attempt whose callback never comes would hold its slot forever: an *attempt timeout* in
 the retry policy abandons it and retries. An *expiration date* gives up on work that is no
 longer worth doing. Both run on the operation's retry scheduler, so this page moves a test
 clock instead of waiting. Last, a stored operation waits for a *run condition*.
 */
import Foundation
import PersistentOperations

/// A fetch whose first call never completes, as a lost completion handler would.
final class FlakyFetcher: @unchecked Sendable {
    // @unchecked: `calls` is only touched while `lock` is held.
    private let lock = NSLock()
    private var calls = 0
    func fetch(completion: @escaping @Sendable (Bool) -> Void) {
        lock.lock(); calls += 1; let call = calls; lock.unlock()
        if call > 1 { DispatchQueue.global().async { completion(true) } }   // the first one hangs
    }
}

final class FetchOperation: RetryingOperation, @unchecked Sendable {
    let fetcher = FlakyFetcher()
    let cancels = Counter()

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts   // a late callback then cannot end a later attempt
        fetcher.fetch { _ in self.baseOperationEnded(attempt: attempt, with: .succeeded) }
    }

    // Also called when an attempt is abandoned at its timeout (see abandonBaseOperation).
    override func cancelBaseOperation() { cancels.increment() }
}

final class Counter: @unchecked Sendable {
    // @unchecked: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.lock(); count += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}

/// Waits (briefly, for the page) until `condition` holds.
func waitUntil(_ condition: () -> Bool) {
    let deadline = Date().addingTimeInterval(10)
    while !condition() && Date() < deadline { usleep(1_000) }
    precondition(condition(), "timed out")
}

//: ## An attempt that never calls back is abandoned and retried
let clock = ManualRetryScheduler()
let fetch = FetchOperation()
fetch.retryScheduler = clock
fetch.retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(2), jitter: .none, attemptTimeout: 30)
fetch.start()
clock.advance(by: 30)            // the first attempt times out: cancelBaseOperation, then a 2 s wait
precondition(fetch.cancels.value == 1 && fetch.isWaitingToRetry && !fetch.isCancelled)
clock.advance(by: 2)             // the second attempt calls back
waitUntil { fetch.isFinished }
print("fetch:", fetch.outcome!, "after", fetch.numberOfAttempts, "attempts")
precondition(fetch.outcome?.isSuccess == true && fetch.numberOfAttempts == 2)

//: ## An operation waiting for a retry fails at its expiration date
let sendClock = ManualRetryScheduler()
let send = AsyncRetryingOperation(retryPolicy: .constant(600)) { _ in
    throw URLError(.notConnectedToInternet)
}
send.retryScheduler = sendClock
send.expirationDate = sendClock.now.addingTimeInterval(60)   // worthless in a minute
send.start()
waitUntil { send.isWaitingToRetry }
sendClock.advance(by: 60)
waitUntil { send.isFinished }
let expired = send.outcome?.error as? RetryingOperationError
print("send:", expired?.code ?? "-", "-", expired?.message ?? "")
precondition(expired?.code == .expired && send.numberOfAttempts == 1)

//: ## A stored operation saves its expiration date; pending at that date, it fails as expired
struct Reminder: Codable, Sendable { var text: String }

final class SendReminder: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "playground.send-reminder"
    let payload: Reminder
    init(payload: Reminder) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) { baseOperationEnded() }
}

let storeURL = FileManager.default.temporaryDirectory.appendingPathComponent("playground-expiry-\(UUID().uuidString)")
let storeClock = ManualRetryScheduler()
do {
    let queue = try PersistentOperationQueue(
        directory: storeURL, operationQueue: OperationQueue(),
        configuration: PersistentOperationQueue.Configuration(scheduler: storeClock)
    )
    queue.register(SendReminder.self)
    var options = EnqueueOptions()
    options.notBefore = storeClock.now.addingTimeInterval(3600)       // not before an hour from now
    options.expirationDate = storeClock.now.addingTimeInterval(1800)  // but worthless after half an hour
    let id = try queue.addOperation(SendReminder(payload: Reminder(text: "stand-up")), options: options).id
    print("stored, expires:", queue.operation(withID: id)!.expirationDate!)
    storeClock.advance(by: 1800)
    queue.waitUntilAllOperationsAreFinished()
    let failed = try queue.failedOperations()
    print("failed:", failed.map { $0.reason })
    precondition(failed.count == 1 && failed[0].reason.contains("expired"))
    queue.close()
}

//: ## A stored operation waits for its run condition, without a slot, a retry or polling
do {
    let queue = try PersistentOperationQueue(
        directory: storeURL, operationQueue: OperationQueue(),
        configuration: PersistentOperationQueue.Configuration(scheduler: storeClock)
    )
    queue.register(SendReminder.self)
    let network = ManualRunCondition(isSatisfied: false)
    queue.register(network, as: "network")
    try queue.addOperation(SendReminder(payload: Reminder(text: "sync")), options: EnqueueOptions(conditions: ["network"]))
    waitUntil { (try? queue.counts().waitingForConditions) == 1 }
    print("waiting for the network:", try queue.counts().waitingForConditions)
    network.isSatisfied = true          // the reminder starts now
    queue.waitUntilAllOperationsAreFinished()
    let left = try queue.counts().pending
    precondition(left == 0)
    queue.close()
}
try? FileManager.default.removeItem(at: storeURL)
print("done")
