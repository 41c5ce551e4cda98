/*:
 [Previous](@previous)

 # Ordered lanes

 Operations added with the same lane run one at a time, in the order they were added, while
 other lanes run beside them: the messages of one conversation go out in order, and another
 conversation does not wait. The next one starts when the one before it ends, however it
 ends; the order is saved, so it survives a crash.
 */
import Foundation
import PersistentOperations

struct Message: Codable, Sendable {
    var chat: Int
    var text: String
    var refused: Bool = false
}

/// Where messages leave a trace for the page to read: any thread may use it.
final class Outbox: @unchecked Sendable {
    // @unchecked: `lines` is only touched while `lock` is held.
    private let lock = NSLock()
    private var lines: [String] = []
    func add(_ line: String) { lock.lock(); lines.append(line); lock.unlock() }
    var sent: [String] { lock.lock(); defer { lock.unlock() }; return lines }
}
let outbox = Outbox()

struct Refused: Error {}

final class SendMessage: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest belongs to RetryingOperation.
    static let persistenceIdentifier = "playground.send-message"
    let payload: Message

    init(payload: Message) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        if payload.refused {
            baseOperationEnded(failingWith: Refused())      // for good
        } else {
            outbox.add("\(payload.chat): \(payload.text)")
            baseOperationEnded()
        }
    }
}

let storeURL = FileManager.default.temporaryDirectory
    .appendingPathComponent("playground-lanes-\(UUID().uuidString)")
//: ## First launch: two conversations, then "crash" before anything is sent
do {
    let operations = OperationQueue()
    operations.isSuspended = true
    let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: operations)
    queue.register(SendMessage.self)
    for (chat, texts) in [(1, ["Hi", "How are you?", "Call me"]), (2, ["Meeting at 3"])] {
        for text in texts {
            try queue.addOperation(SendMessage(payload: Message(chat: chat, text: text)),
                                   options: EnqueueOptions(lane: "chat:\(chat)"))
        }
    }
    let waiting = try queue.counts().waitingForLane
    precondition(waiting == 2)                          // behind "Hi"
    queue.close()
}
//: ## Next launch: each conversation goes out in order, beside the other
do {
    let operations = OperationQueue()
    operations.maxConcurrentOperationCount = 4
    let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: operations)
    queue.register(SendMessage.self)
    try queue.restore()
    queue.waitUntilAllOperationsAreFinished()
    print(outbox.sent)
    precondition(outbox.sent.filter { $0.hasPrefix("1:") } == ["1: Hi", "1: How are you?", "1: Call me"])
    queue.close()
}
//: ## A lane that holds on a failure
//: With `holdsLaneOnFailure`, a refused message stops its lane until it is re-queued or purged.
do {
    let queue = try PersistentOperationQueue(directory: storeURL)
    queue.register(SendMessage.self)
    let strict = EnqueueOptions(lane: "chat:3", holdsLaneOnFailure: true)
    try queue.addOperation(SendMessage(payload: Message(chat: 3, text: "huge video", refused: true)), options: strict)
    try queue.addOperation(SendMessage(payload: Message(chat: 3, text: "did you get it?")), options: strict)
    queue.waitUntilAllOperationsAreFinished()           // the held lane's waiter does not count
    precondition(!outbox.sent.contains("3: did you get it?"))
    for failed in try queue.failedOperations() {
        try queue.purgeFailedOperation(withID: failed.id)   // the lane moves on
    }
    queue.waitUntilAllOperationsAreFinished()
    precondition(outbox.sent.last == "3: did you get it?")
    queue.close()
}
try? FileManager.default.removeItem(at: storeURL)
print("done")
