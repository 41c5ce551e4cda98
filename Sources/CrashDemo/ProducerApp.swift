import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A producer that re-sends after a lost acknowledgement, for the idempotency tests: the
/// child process is killed at random moments and relaunched, and each launch sends again the
/// last request it acknowledged (its acknowledgement "lost") before it calls `restore()`, then
/// the rest, each as one batch with the request's idempotency key.
///
///     crash-demo producer --store DIR --effects FILE --requests N [--members M]
///
/// Request `r` is `M` jobs (members 0..<M) added with `addOperations` and the key
/// `request-r`; each job's payload carries a nonce drawn for that add. Effects lines (each
/// appended and synced before the app goes on):
///
/// - `launch pid=<pid>`
/// - `ack <r> <nonce> <ids>`: the add of request `r` returned, with `ids` operations
/// - `run <r> <member> <nonce>`: an attempt of a job started (a job stored twice would show
///   two nonces for one member)
/// - `done`: every request acknowledged and every job ended
struct ProducerCommand {
    var store: URL
    var effects: String
    var requests: Int
    var members = 3

    func run() throws {
        try Effects.open(effects)
        Effects.write("launch pid=\(getpid())")
        let acknowledged = Self.lastAcknowledged(in: effects)
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        let queue = try PersistentOperationQueue(directory: store, operationQueue: operationQueue)
        queue.register(ProducerJob.self)
        // The last acknowledged request again, before the restore: its key is in the store.
        if acknowledged > 0 { try send(acknowledged, to: queue) }
        _ = try queue.restore()
        if acknowledged < requests {
            for request in (acknowledged + 1)...requests {
                try send(request, to: queue)
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        Effects.write("done")
        queue.close()
    }

    private func send(_ request: Int, to queue: PersistentOperationQueue) throws {
        let nonce = UUID().uuidString.prefix(8)
        let jobs = (0..<members).map { ProducerJob(payload: .init(request: request, member: $0, nonce: String(nonce))) }
        let ids = try queue.addOperations(jobs, options: EnqueueOptions(idempotencyKey: "request-\(request)"))
        Effects.write("ack \(request) \(nonce) \(ids.count)")
    }

    /// The highest request an `ack` line of `effects` names, or 0.
    static func lastAcknowledged(in effects: String) -> Int {
        let text = (try? String(contentsOfFile: effects, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line -> Int? in
            let fields = line.split(separator: " ")
            return fields.first == "ack" && fields.count >= 2 ? Int(fields[1]) : nil
        }.max() ?? 0
    }
}

extension ProducerCommand {
    init(arguments: [String]) {
        guard let store = option("--store", in: arguments), let effects = option("--effects", in: arguments),
              let requests = option("--requests", in: arguments).flatMap(Int.init) else {
            fail("usage: crash-demo producer --store DIR --effects FILE --requests N [--members M]")
        }
        self.init(store: URL(fileURLWithPath: store), effects: effects, requests: requests)
        if let members = option("--members", in: arguments).flatMap(Int.init) { self.members = members }
    }
}

/// One job of a ``ProducerCommand`` request: journals its start, then succeeds 2 ms later.
final class ProducerJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the payload never changes; the rest belongs to RetryingOperation.
    struct Payload: Codable, Sendable {
        var request: Int
        var member: Int
        var nonce: String
    }

    static let persistenceIdentifier = "demo.producer-job"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Effects.write("run \(payload.request) \(payload.member) \(payload.nonce)")
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(2)) { [self] in
            baseOperationEnded()
        }
    }
}
