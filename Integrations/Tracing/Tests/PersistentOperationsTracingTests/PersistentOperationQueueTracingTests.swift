import Foundation
import InMemoryTracing
import PersistentOperations
import PersistentOperationsTracing
import RetryingOperation
import Testing
import Tracing

/// An upload that fails with a retriable error on its first attempt when asked to, then succeeds
/// (or fails for good when `refused`), each attempt taking 20 ms.
final class TracedUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the payload never changes; the rest belongs to RetryingOperation.
    struct Payload: Codable, Sendable {
        var retriesOnce = false
        var refused = false
    }

    struct Busy: Error {}
    struct Refused: Error, CustomStringConvertible { var description: String { "403 refused" } }

    static let persistenceIdentifier = "test.traced-upload"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = .constant(0, retryLimit: .maximum(3))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { [self] in
            if payload.refused {
                baseOperationEnded(failingWith: Refused())
            } else if payload.retriesOnce && !isRetry {
                baseOperationEnded(withRetriableError: Busy())
            } else {
                baseOperationEnded()
            }
        }
    }
}

@Suite("Tracing: a span per attempt")
struct PersistentOperationQueueTracingTests {
    @Test func eachAttemptIsASpanWithItsOutcomeDurationAndAttributes() async throws {
        // Given a queue traced into an in-memory tracer
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tracing-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let queue = try PersistentOperationQueue(directory: directory)
        defer { queue.close() }
        queue.register(TracedUpload.self)
        let tracer = InMemoryTracer()
        let tracing = PersistentOperationQueueTracing(queue: queue, tracer: tracer)

        // When one upload retries once then succeeds, and another is refused
        let flaky = try queue.addOperation(TracedUpload(payload: .init(retriesOnce: true)), options: EnqueueOptions(tags: ["album:7", "wifi"]))
        let refused = try queue.addOperation(TracedUpload(payload: .init(refused: true)), options: EnqueueOptions(lane: "chat:1"))
        await queue.allOperationsFinished()
        try await Task.sleep(for: .milliseconds(100))   // events are delivered off the attempt's thread

        // Then there are three spans, one per attempt, each with its outcome and duration
        let spans = tracer.finishedSpans
        #expect(spans.count == 3)
        func outcome(_ span: FinishedInMemorySpan) -> String? {
            if case .string(let value)? = span.attributes["persistent_operations.outcome"]?.toSpanAttribute() { return value }
            return nil
        }
        func string(_ span: FinishedInMemorySpan, _ key: String) -> String? {
            if case .string(let value)? = span.attributes[key]?.toSpanAttribute() { return value }
            return nil
        }
        let flakySpans = spans.filter { string($0, "persistent_operations.operation.id") == flaky.id.rawValue }
        #expect(flakySpans.map(outcome) == ["retry", "succeeded"])
        #expect(flakySpans.map { $0.status?.code } == [.error, nil])
        #expect(flakySpans.allSatisfy { string($0, "persistent_operations.tags") == "album:7,wifi" })
        let refusedSpan = try #require(spans.first { string($0, "persistent_operations.operation.id") == refused.id.rawValue })
        #expect(outcome(refusedSpan) == "failed")
        #expect(refusedSpan.status?.code == .error && refusedSpan.status?.message?.contains("403 refused") == true)
        #expect(string(refusedSpan, "persistent_operations.lane") == "chat:1")
        for span in spans {
            #expect(span.operationName == "test.traced-upload attempt")
            #expect(span.kind == .consumer)
            let nanoseconds = span.endInstant.nanosecondsSinceEpoch - span.startInstant.nanosecondsSinceEpoch
            #expect(nanoseconds >= 15_000_000 && nanoseconds < 5_000_000_000, "an attempt of 20 ms lasted \(nanoseconds) ns")
        }

        // And once stopped, no more spans are made
        tracing.stop()
        try queue.addOperation(TracedUpload(payload: .init()))
        await queue.allOperationsFinished()
        try await Task.sleep(for: .milliseconds(100))
        #expect(tracer.finishedSpans.count == 3)
    }
}
