import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: the operations' log handler", .timeLimit(.minutes(1)))
struct OperationLogHandlerTests {
    @Test func addedAndRestoredOperationsWithoutAHandlerLogToTheConfiguredOneAndOthersKeepTheirOwn() async throws {
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let messages = Locked<[String]>([])
        let own = Locked<[String]>([])
        func open(_ clock: ManualRetryScheduler) throws -> PersistentOperationQueue {
            var configuration = PersistentOperationQueue.Configuration(scheduler: clock)
            configuration.operationLogHandler = RetryLogHandler(minimumLevel: .info) { message in
                messages.withLock { $0.append("\(message.operationDescription): \(message.text)") }
            }
            let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
            queue.register(ScriptedUpload.self)
            return queue
        }
        // Given a launch that adds an operation that retries, and one with a handler of its own
        var queue = try open(ManualRetryScheduler())
        let retrying = ScriptedUpload(payload: UploadPayload(name: "retrying", journal: journal, steps: [.retry, .retry, .succeed]))
        retrying.name = "retrying"
        let withOwn = ScriptedUpload(payload: UploadPayload(name: "own", journal: journal, steps: [.retry, .retry, .succeed]))
        withOwn.logHandler = RetryLogHandler(minimumLevel: .info) { message in own.withLock { $0.append(message.text) } }
        try queue.addOperation(retrying)
        try queue.addOperation(withOwn)
        #expect(try await eventually { messages.withLock { $0.count } == 1 && own.withLock { $0.count } == 1 })
        // Then the added operation without a handler logged its retry to the configured one,
        // and the other to its own
        #expect(messages.withLock { $0 }.first?.hasPrefix("retrying: attempt failed; retrying in 10.0 s") == true)

        // When the app is relaunched and restores them
        queue.close()
        let clock = ManualRetryScheduler()   // (the first launch's timers stay on its own clock)
        queue = try open(clock)
        try queue.restore()
        // and their retry dates pass (the clock is moved on until they have run: a single move,
        // right after the first timer was armed, left them waiting in about one run in ten)
        // Then both restored operations, built from their payloads without a handler, log their
        // next retries to the configured one
        #expect(try await eventually {
            if messages.withLock({ $0.count }) < 3 { clock.advance(by: 10) }
            return messages.withLock { $0.count } >= 3
        })
        #expect(messages.withLock { $0.count } == 3)
        #expect(messages.withLock { $0 }.dropFirst().allSatisfy { $0.contains("ScriptedUpload") && $0.contains("attempt failed; retrying") })
        #expect(own.withLock { $0.count } == 1)
        queue.close()
    }
}
