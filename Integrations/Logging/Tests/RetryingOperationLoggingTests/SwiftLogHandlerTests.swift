import Foundation
import Logging
import PersistentOperations
import RetryingOperation
import RetryingOperationLogging
import Testing

/// A swift-log backend that keeps every record.
final class CapturingLogHandler: LogHandler, @unchecked Sendable {
    // @unchecked: `records` is only touched under `lock`; the LogHandler value fields are
    // set before the logger is shared.
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    private let lock = NSLock()
    private var records: [Record] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lock.lock()
        defer { lock.unlock() }
        records.append(Record(level: event.level, message: event.message.description, metadata: event.metadata ?? [:]))
    }

    var all: [Record] {
        lock.lock()
        defer { lock.unlock() }
        return records
    }
}

/// An operation that fails once with a retriable error, then succeeds.
final class FlakyJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable { var name: String }
    static let persistenceIdentifier = "logging-tests.flaky-job"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(0.01), jitter: .none)
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        if isRetry { baseOperationEnded() } else { baseOperationEnded(withRetriableError: URLError(.timedOut)) }
    }
}

@Suite struct SwiftLogHandlerTests {
    @Test func messagesReachTheLoggerWithTheirLevelAndOperation() async {
        let capture = CapturingLogHandler()
        capture.logLevel = .debug
        let logger = Logger(label: "test") { _ in capture }
        let operation = FlakyJob(payload: .init(name: "a"))
        operation.name = "job a"
        operation.logHandler = .swiftLog(logger)
        operation.start()
        #expect(await operation.finalOutcome.isSuccess)
        let records = capture.all
        #expect(records.contains { $0.level == .info && $0.message.contains("retrying in 0.01 s") && $0.metadata["operation"] == "job a" })
        #expect(records.contains { $0.level == .debug && $0.message.contains("starting attempt 1") })
    }

    @Test func theLoggersLevelFiltersBeforeFormatting() async {
        let capture = CapturingLogHandler()
        capture.logLevel = .warning
        let handler = RetryLogHandler.swiftLog(Logger(label: "test") { _ in capture }, minimumLevel: .debug)
        #expect(handler.minimumLevel == .warning)
        let operation = FlakyJob(payload: .init(name: "b"))
        operation.logHandler = handler
        operation.start()
        #expect(await operation.finalOutcome.isSuccess)
        #expect(capture.all.isEmpty)
    }

    @Test func aQueueGivesRestoredOperationsTheSwiftLogHandler() async throws {
        let capture = CapturingLogHandler()
        let logger = Logger(label: "test") { _ in capture }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("logging-tests-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        func open() throws -> PersistentOperationQueue {
            var configuration = PersistentOperationQueue.Configuration()
            configuration.logHandler = .swiftLog(logger)
            configuration.operationLogHandler = .swiftLog(logger)
            let queue = try PersistentOperationQueue(directory: directory, operationQueue: OperationQueue(), configuration: configuration)
            queue.register(FlakyJob.self)
            return queue
        }
        // Given a job stored by a launch that ended before it ran
        var queue = try open()
        queue.isSuspended = true
        try queue.addOperation(FlakyJob(payload: .init(name: "restored")))
        queue.close()
        // When the next launch restores and runs it
        queue = try open()
        try queue.restore()
        await queue.allOperationsFinished()
        queue.close()
        // Then its retry was logged through swift-log, and so were the queue's own messages
        #expect(capture.all.contains { $0.message.contains("retrying in 0.01 s") && $0.metadata["operation"]?.description.contains("FlakyJob") == true })
        #expect(capture.all.contains { $0.metadata["operation"] == "PersistentOperationQueue" && $0.message.contains("restored 1 operations") })
        // And the messages carry their structured fields as metadata
        let retry = try #require(capture.all.first { $0.message.contains("retrying in 0.01 s") })
        #expect(retry.metadata["type"] == "\(FlakyJob.persistenceIdentifier)")
        #expect(retry.metadata["operation_id"] != nil)
        #expect(retry.metadata["outcome"] == "retry")
        #expect(retry.metadata["attempt"] == "1")
        #expect(retry.metadata["duration"] != nil)
        #expect(capture.all.contains { $0.metadata["restored"] == "1" && $0.metadata["quarantined"] == "0" })
    }
}
