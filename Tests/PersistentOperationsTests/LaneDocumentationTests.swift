import Foundation
import Testing
import PersistentOperations

// The code samples of the README's "Ordered lanes" section and of the DocC article
// *Ordered lanes*, compiled and run here (see `scripts/readme-snippets.py`).

// snippet: send-message
struct Message: Codable, Sendable {
    var chatID: Int
    var text: String
}

final class SendMessage: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.send-message"
    let payload: Message

    init(payload: Message) {
        self.payload = payload
        super.init()
        retryPolicy = .persistent
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        ChatServer.send(payload) { result in
            switch result {
            case .sent: self.baseOperationEnded()
            case .refused(let error): self.baseOperationEnded(failingWith: error)   // for good
            case .unreachable(let error): self.baseOperationEnded(withRetriableError: error)
            }
        }
    }
}
// end snippet

/// A stand-in for a chat service: records what it received, in order, and refuses messages
/// longer than 100 characters.
enum ChatServer {
    enum Result: Sendable {
        case sent
        case refused(any Error)
        case unreachable(any Error)
    }

    struct TooLarge: Error {}

    static let received = Locked<[String]>([])

    static func send(_ message: Message, completion: @escaping @Sendable (Result) -> Void) {
        guard message.text.count <= 100 else {
            DispatchQueue.global().async { completion(.refused(TooLarge())) }
            return
        }
        received.withLock { $0.append("\(message.chatID): \(message.text)") }
        DispatchQueue.global().async { completion(.sent) }
    }
}

@Suite("Documentation examples (ordered lanes)", .timeLimit(.minutes(1)))
struct LaneDocumentationTests {
    @Test func theMessagesOfAConversationGoOutInOrderAfterTheirPhoto() async throws {
        let temporary = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        let queue = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
        queue.register(SendMessage.self)
        queue.register(PersistentUpload.self)
        try queue.restore()
        // snippet: ordered-lanes
        let chat = EnqueueOptions(lane: "chat:42")      // one lane per conversation
        try queue.addOperation(SendMessage(payload: Message(chatID: 42, text: "Look!")), options: chat)

        let photo = PersistentUpload(payload: Upload(file: "IMG_4201.heic", album: 42))
        let caption = SendMessage(payload: Message(chatID: 42, text: "From the summit"))
        caption.addDependency(photo)                     // waits for its photo, and for its turn
        try queue.addOperation(photo)                    // uploads beside the lane
        try queue.addOperation(caption, options: chat)
        // end snippet
        try queue.addOperation(SendMessage(payload: Message(chatID: 42, text: "Bye")), options: chat)
        await queue.allOperationsFinished()
        let received = ChatServer.received.withLock { $0 }.filter { $0.hasPrefix("42:") }
        #expect(received == ["42: Look!", "42: From the summit", "42: Bye"])
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_4201.heic") })
    }

    @Test func cancellingAMessageByItsTagTakesItsVideoButNotTheLaterMessages() async throws {
        let temporary = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
        queue.register(SendMessage.self)
        queue.register(PersistentUpload.self)
        try queue.restore()
        // snippet: cancel-message
        let tag = "message:43-18"                  // one tag per message, on it and its video
        let video = PersistentUpload(payload: Upload(file: "MOV_4318.mov", album: 43))
        let message = SendMessage(payload: Message(chatID: 43, text: "Watch this"))
        message.addDependency(video)
        try queue.addOperation(video, options: EnqueueOptions(tags: [tag]))
        try queue.addOperation(message, options: EnqueueOptions(tags: [tag], lane: "chat:43"))
        // end snippet
        try queue.addOperation(SendMessage(payload: Message(chatID: 43, text: "Never mind")), options: EnqueueOptions(lane: "chat:43"))
        // snippet: cancel-message-delete
        queue.cancelOperations(taggedWith: tag)    // the user deleted it: the message and its video
        // end snippet
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        let received = ChatServer.received.withLock { $0 }
        #expect(received.contains("43: Never mind") && !received.contains("43: Watch this"))
        #expect(!DocumentationServer.uploaded.withLock { $0.contains("MOV_4318.mov") })
    }

    @Test func aLaneThatHoldsOnAFailureMovesOnOnceTheFailureIsPurged() async throws {
        let temporary = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(directory: temporary.store)
        queue.register(SendMessage.self)
        try queue.restore()
        let oversized = String(repeating: "a", count: 500)
        // snippet: lane-hold
        let strict = EnqueueOptions(lane: "chat:7", holdsLaneOnFailure: true)
        try queue.addOperation(SendMessage(payload: Message(chatID: 7, text: oversized)), options: strict)
        try queue.addOperation(SendMessage(payload: Message(chatID: 7, text: "Still there?")), options: strict)
        // end snippet
        await queue.allOperationsFinished()             // the held lane's waiters do not count
        // snippet: lane-status
        for info in queue.operations() where info.lane == "chat:7" {
            print(info.state)                            // waitingForLane: the refusal holds the lane
        }
        // end snippet
        #expect(queue.operations().map(\.state) == [.waitingForLane])
        #expect(!ChatServer.received.withLock { $0 }.contains("7: Still there?"))
        // snippet: lane-hold-release
        for failed in try queue.failedOperations() {
            try queue.purgeFailedOperation(withID: failed.id)    // or retryFailedOperation(withID:)
        }
        // end snippet
        await queue.allOperationsFinished()
        #expect(ChatServer.received.withLock { $0 }.contains("7: Still there?"))
        #expect(try queue.counts().pending == 0)
    }
}
