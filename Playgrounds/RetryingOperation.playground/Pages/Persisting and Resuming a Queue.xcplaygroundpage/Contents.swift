/*:
 [Previous](@previous)

 # Persisting and resuming a queue

 A `PersistentOperationQueue` saves each operation as a file before `addOperation` returns,
 so an app that crashes or is killed picks up its pending work at the next launch with
 `restore()`. An operation opts in by conforming to `PersistentOperation`: a stable type
 name and a `Codable` payload that holds everything an attempt needs.
 */
import Foundation
import PersistentOperations

struct Reminder: Codable, Sendable {
    var text: String
    var failuresBeforeSuccess: Int
}

/// Where attempts leave a trace for the page to read: any thread may use it.
final class Outbox: @unchecked Sendable {
    // @unchecked: `sent` is only touched while `lock` is held.
    private let lock = NSLock()
    private var sent: [String] = []
    func send(_ text: String) { lock.lock(); sent.append(text); lock.unlock() }
    var messages: [String] { lock.lock(); defer { lock.unlock() }; return sent }
}
let outbox = Outbox()

final class SendReminder: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest belongs to RetryingOperation.
    static let persistenceIdentifier = "playground.send-reminder"   // never change it
    let payload: Reminder

    init(payload: Reminder) {
        self.payload = payload
        super.init()
        retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(0.05), jitter: .none)
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        // numberOfRetries continues across launches: a restored operation resumes its count.
        if numberOfRetries! < payload.failuresBeforeSuccess {
            baseOperationEnded(withRetriableError: URLError(.notConnectedToInternet))
        } else {
            outbox.send(payload.text)
            baseOperationEnded()
        }
    }
}

let storeURL = FileManager.default.temporaryDirectory
    .appendingPathComponent("playground-store-\(UUID().uuidString)")
//: ## First launch: add work, then "crash"
//: The operation queue is suspended, as if the app died before anything ran. Closing the
//: queue releases its lock, which is what the system does when a process dies.
do {
    let operations = OperationQueue()
    operations.isSuspended = true
    let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: operations)
    queue.register(SendReminder.self)
    try queue.addOperation(SendReminder(payload: Reminder(text: "Water the plants", failuresBeforeSuccess: 0)))
    try queue.addOperation(SendReminder(payload: Reminder(text: "Call Mum", failuresBeforeSuccess: 2)))
    let counts = try queue.counts()
    precondition(counts.pending == 2)
    queue.close()
}
//: ## Next launch: restore and finish
do {
    let queue = try PersistentOperationQueue(directory: storeURL)
    queue.register(SendReminder.self)                 // register every type before restoring
    let report = try queue.restore()
    print("restored \(report.restored.count) operations")
    precondition(report.restored.count == 2 && report.quarantined.isEmpty)
    queue.waitUntilAllOperationsAreFinished()
    print("sent: \(outbox.messages.sorted())")
    precondition(outbox.messages.sorted() == ["Call Mum", "Water the plants"])
    let counts = try queue.counts()
    precondition(counts.pending == 0)                  // records are removed on success
}
//: A corrupt file in the store never crashes the app: `restore()` moves it to
//: `quarantine/` and reports it, and every other record is restored.
try? FileManager.default.removeItem(at: storeURL)
print("done")
