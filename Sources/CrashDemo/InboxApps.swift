import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The two child processes of the inbox soak: producers (app extensions) that add messages
// through the store's inbox without its lock, and the owner (the app) that holds the store and
// takes the messages in, each killed at random moments and relaunched by the tests.

/// A producer that adds through the store's inbox (``PersistentOperationInbox``), as an app
/// extension would: it never opens the store.
///
///     crash-demo inbox-producer --store DIR --effects FILE --producer NAME --messages N [--pause-ms MS]
///
/// Each launch goes on after the last message its effects file acknowledges: for each message
/// `m` up to `N` it draws a nonce, adds one ``InboxMessage`` with `EnqueueOptions(lane: NAME)`
/// and no idempotency key, then acknowledges it, and waits a random 0 to `MS` ms (default 0)
/// before the next, so that its adds spread over the owner's launches. A message whose add
/// returned but whose acknowledgement a kill lost is sent again by the next launch with a new
/// nonce: two adds, two nonces for one `m` (the producer re-sends; the inbox must not
/// duplicate either add).
/// Effects lines (one file per producer, each line appended and synced before it goes on):
///
/// - `launch pid=<pid>`
/// - `send <m> <nonce>`: the add of message `m` with `nonce` is about to start
/// - `ack <m> <nonce>`: it returned (the letter is durable)
/// - `done`: every message acknowledged
struct InboxProducerCommand {
    static let usage = "usage: crash-demo inbox-producer --store DIR --effects FILE --producer NAME --messages N [--pause-ms MS]"

    var store: URL
    var effects: String
    var producer: String
    var messages: Int
    var pauseMilliseconds = 0

    func run() throws {
        try Effects.open(effects)
        Effects.write("launch pid=\(getpid())")
        let acknowledged = ProducerCommand.lastAcknowledged(in: effects)
        let inbox = PersistentOperationInbox(directory: store, producer: producer)
        if acknowledged < messages {
            for message in (acknowledged + 1)...messages {
                let nonce = String(UUID().uuidString.prefix(8))
                Effects.write("send \(message) \(nonce)")
                let operation = InboxMessage(payload: .init(producer: producer, message: message, nonce: nonce))
                try inbox.addOperation(operation, options: EnqueueOptions(lane: producer))
                Effects.write("ack \(message) \(nonce)")
                if pauseMilliseconds > 0 { usleep(UInt32.random(in: 0...UInt32(pauseMilliseconds) * 1_000)) }
            }
        }
        Effects.write("done")
    }
}

extension InboxProducerCommand {
    init(arguments: [String]) {
        guard let store = option("--store", in: arguments), let effects = option("--effects", in: arguments),
              let producer = option("--producer", in: arguments), !producer.isEmpty, !producer.contains(" "),
              let messages = option("--messages", in: arguments).flatMap(Int.init), messages >= 0 else {
            fail(Self.usage)
        }
        self.init(store: URL(fileURLWithPath: store), effects: effects, producer: producer, messages: messages)
        if let pause = option("--pause-ms", in: arguments) {
            guard let milliseconds = Int(pause), (0...10_000).contains(milliseconds) else { fail(Self.usage) }
            pauseMilliseconds = milliseconds
        }
    }
}

/// The app that holds the store: it opens a queue on it, restores (taking in the letters
/// waiting) and runs, taking each letter in as it arrives, until it is killed; with
/// `--until-idle` it exits once nothing is pending and no letter waits.
///
///     crash-demo inbox-owner --store DIR --effects FILE [--until-idle]
///
/// The crash-loop limit is far above the number of kills: the soak's kills are not the
/// messages' fault, and every message must end by succeeding. Effects lines (each appended and
/// synced before the app goes on):
///
/// - `launch pid=<pid>`
/// - `restored`: `restore()` returned (the letters waiting at the launch are taken in)
/// - `run <producer> <m> <nonce> <record id>`: an attempt of a message started
/// - `idle`: nothing pending, no letter waiting (with `--until-idle` only)
struct InboxOwnerCommand {
    static let usage = "usage: crash-demo inbox-owner --store DIR --effects FILE [--until-idle]"

    var store: URL
    var effects: String
    var untilIdle = false

    func run() throws {
        try Effects.open(effects)
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        var configuration = PersistentOperationQueue.Configuration()
        configuration.crashLoopLimit = 1_000_000
        let queue = try PersistentOperationQueue(directory: store, operationQueue: operationQueue, configuration: configuration)
        queue.register(InboxMessage.self)
        InboxMessage.queue = queue
        Effects.write("launch pid=\(getpid())")
        try queue.restore()
        Effects.write("restored")
        guard untilIdle else {
            // Letters are taken in as they arrive, on the queue's own threads.
            while true { sleep(60) }
        }
        let inbox = PersistentOperationInbox(directory: store)
        // Idle twice in a row, 50 ms apart: a letter being taken in is, for a moment, counted
        // by neither the queue nor the inbox (it is removed before the queue tracks its
        // operations).
        var idleChecks = 0
        while idleChecks < 2 {
            queue.waitUntilAllOperationsAreFinished()
            usleep(50_000)
            if try queue.counts().pending == 0, inbox.waitingCount == 0 {
                idleChecks += 1
            } else {
                idleChecks = 0
            }
        }
        Effects.write("idle")
        queue.close()
    }
}

extension InboxOwnerCommand {
    init(arguments: [String]) {
        guard let store = option("--store", in: arguments), let effects = option("--effects", in: arguments) else {
            fail(Self.usage)
        }
        self.init(store: URL(fileURLWithPath: store), effects: effects, untilIdle: arguments.contains("--until-idle"))
    }
}

/// A message a producer adds through the inbox: journals each attempt's start with the record
/// it runs as, then succeeds 1 to 3 ms later, on a thread of its own.
final class InboxMessage: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the payload never changes; the rest belongs to RetryingOperation.
    struct Payload: Codable, Sendable {
        var producer: String
        var message: Int
        var nonce: String
    }

    static let persistenceIdentifier = "demo.inbox-message"

    /// The queue whose record identifiers the attempts journal. Set once by
    /// ``InboxOwnerCommand`` before anything is restored; read-only afterwards.
    nonisolated(unsafe) static var queue: PersistentOperationQueue?

    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let id = Self.queue?.identifier(of: self)?.rawValue ?? "untracked"
        Effects.write("run \(payload.producer) \(payload.message) \(payload.nonce) \(id)")
        let pause = UInt32.random(in: 1_000...3_000)
        Thread.detachNewThread { [self] in
            usleep(pause)
            baseOperationEnded()
        }
    }
}
