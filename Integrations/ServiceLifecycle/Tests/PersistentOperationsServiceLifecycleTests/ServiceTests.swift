import Foundation
import Logging
import PersistentOperations
import PersistentOperationsServiceLifecycle
import RetryingOperation
import ServiceLifecycle
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A job whose attempt takes `milliseconds` and can be stopped.
final class SlowJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable {
        var name: String
        var milliseconds: Int
    }
    static let persistenceIdentifier = "service-tests.slow-job"
    static let done = Mutex<[String]>([])
    let payload: Payload
    private let stopped = Mutex(false)

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Thread.detachNewThread { [self] in
            var waited = 0
            while waited < payload.milliseconds {
                usleep(5_000)
                waited += 5
                if stopped.withLock({ $0 }) { return }
            }
            Self.done.withLock { $0.append(payload.name) }
            baseOperationEnded()
        }
    }

    override func cancelBaseOperation() {
        stopped.withLock { $0 = true }
    }
}

/// A lock box (the test target may not use the library's).
final class Mutex<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

@Suite(.serialized) struct ServiceTests {
    private func makeDirectory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("service-tests-\(UUID().uuidString)")
    }

    private func openQueue(_ directory: URL) throws -> PersistentOperationQueue {
        let operations = OperationQueue()
        operations.maxConcurrentOperationCount = 2
        let queue = try PersistentOperationQueue(directory: directory, operationQueue: operations)
        queue.register(SlowJob.self)
        return queue
    }

    @Test func sigtermShutsTheQueueDownGracefullyAndTheNextRunFinishesTheRest() async throws {
        let directory = makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Given a store with a quick job and a slow one, left by an earlier process
        var queue = try openQueue(directory)
        queue.isSuspended = true
        try queue.addOperation(SlowJob(payload: .init(name: "quick", milliseconds: 100)))
        try queue.addOperation(SlowJob(payload: .init(name: "slow", milliseconds: 20_000)))
        queue.close()

        // When a service group runs the queue and the process gets SIGTERM while both run
        queue = try openQueue(directory)
        let report = Mutex<ShutdownReport?>(nil)
        let service = PersistentOperationQueueService(queue: queue, gracePeriod: 1) { shutdown in report.withLock { $0 = shutdown } }
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        while try queue.counts().running < 2 { try await Task.sleep(for: .milliseconds(10)) }
        kill(getpid(), SIGTERM)
        try await running.value

        // Then the quick job finished within the grace period, the slow one was stopped, and
        // the queue is closed
        let shutdown = try #require(report.withLock { $0 })
        #expect(shutdown.endedInGracePeriod.count == 1)
        #expect(shutdown.stopped.count == 1)
        #expect(SlowJob.done.withLock { $0 }.contains("quick"))
        #expect(throws: PersistenceError.self) { try queue.addOperation(SlowJob(payload: .init(name: "late", milliseconds: 1))) }

        // And the next process restores the stopped job, as a retry with no retry spent
        let next = try openQueue(directory)
        let restored = try next.restore()
        #expect(restored.restored.count == 1)
        #expect(next.operations().first?.numberOfRetries == 0)
        next.close()
    }

    @Test func aShutdownTriggeredDuringTheRestoreStillShutsDownCleanly() async throws {
        let directory = makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Given a store of 2,000 pending jobs
        var queue = try openQueue(directory)
        queue.isSuspended = true
        try queue.addOperations((0..<2_000).map { SlowJob(payload: .init(name: "job\($0)", milliseconds: 1)) })
        queue.close()

        // When the group is told to shut down as soon as it starts, during the restore
        queue = try openQueue(directory)
        let service = PersistentOperationQueueService(queue: queue, gracePeriod: 1)
        let group = ServiceGroup(services: [service], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        await group.triggerGracefulShutdown()
        try await running.value

        // Then the queue closed, and every job not done is still stored
        #expect(throws: PersistenceError.self) { try queue.addOperation(SlowJob(payload: .init(name: "late", milliseconds: 1))) }
        let next = try openQueue(directory)
        next.isSuspended = true
        let left = try next.restore().restored.count
        let done = SlowJob.done.withLock { $0.filter { $0.hasPrefix("job") }.count }
        #expect(left + done >= 2_000)
        next.close()
    }
}
