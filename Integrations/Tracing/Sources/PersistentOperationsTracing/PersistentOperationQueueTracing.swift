import Foundation
import PersistentOperations
import Tracing

/// Records one swift-distributed-tracing span per attempt of a `PersistentOperationQueue`'s
/// operations.
///
/// Create it once per queue and keep it while the queue runs. It observes the queue beside
/// any other observer (through `PersistentOperationQueue.addEventObserver(_:)`) and makes each
/// span when the attempt has ended, from the attempt's measured duration: no state is kept
/// per attempt, and an attempt costs nothing until it ends.
///
/// ```swift
/// import PersistentOperationsTracing
///
/// let tracing = PersistentOperationQueueTracing(queue: queue)   // InstrumentationSystem.tracer
/// ```
///
/// Each span is named after the operation's type (`"thumbnail.render attempt"`), of kind
/// `.consumer`, and carries these attributes:
///
/// | Attribute | Value |
/// |---|---|
/// | `persistent_operations.operation.id` | the operation's identifier |
/// | `persistent_operations.operation.type` | its `persistenceIdentifier` |
/// | `persistent_operations.attempt` | the attempt number, from 1, across launches |
/// | `persistent_operations.outcome` | `succeeded`, `failed`, `cancelled`, `retry`, `retry_uncounted`, `period_succeeded` or `period_failed` |
/// | `persistent_operations.tags` | its tags, sorted, comma-separated (when it has some) |
/// | `persistent_operations.lane` | its ordered lane (when it has one) |
///
/// An attempt that failed for good, or ended with a retry, has an error status (with the
/// failure's reason when the queue reports one). The spans are top-level (they start a
/// trace of their own): the queue starts attempts outside the task that added them. To make
/// the calls an attempt makes children of a span of their own, wrap them in `withSpan` inside
/// the operation's body.
///
/// Thread safety: create and stop it from any thread.
public final class PersistentOperationQueueTracing: Sendable {
    private let observation: PersistentOperationQueue.EventObservation

    /// Starts recording a span per attempt of `queue`'s operations with `tracer`.
    ///
    /// - Parameters:
    ///   - queue: The queue whose attempts are traced.
    ///   - tracer: Where spans go. Default: the tracer bootstrapped in `InstrumentationSystem`.
    public init(queue: PersistentOperationQueue, tracer: any Tracer = InstrumentationSystem.tracer) {
        observation = queue.addEventObserver { event, subject in
            Self.record(event, subject: subject, tracer: tracer)
        }
    }

    /// Stops recording spans (spans of attempts that end later are not made).
    public func stop() {
        observation.cancel()
    }

    deinit {
        observation.cancel()
    }

    static func record<T: Tracer>(_ event: PersistentOperationEvent, subject: PersistentOperationEvent.Subject?, tracer: T) {
        // Only the events that end an attempt carry its duration.
        guard let subject, let duration = subject.attemptDuration else { return }
        let outcome: String
        var failure: String?
        switch event {
        case .succeeded: outcome = "succeeded"
        case .failed(_, let reason):
            outcome = "failed"
            failure = reason
        case .cancelled: outcome = "cancelled"
        case .retryScheduled(_, let isCounted, _, _):
            outcome = isCounted ? "retry" : "retry_uncounted"
            failure = isCounted ? "the attempt ended with a retriable error" : nil
        case .periodEnded(_, let periodFailure, _):
            outcome = periodFailure == nil ? "period_succeeded" : "period_failed"
            failure = periodFailure
        default: return
        }
        let end = Date()
        let start = end.addingTimeInterval(-max(0, duration))
        let span = tracer.startSpan("\(subject.typeIdentifier) attempt", context: .topLevel, ofKind: .consumer, at: instant(start))
        if let id = event.operationID { span.attributes["persistent_operations.operation.id"] = id.rawValue }
        span.attributes["persistent_operations.operation.type"] = subject.typeIdentifier
        span.attributes["persistent_operations.attempt"] = subject.attempt
        span.attributes["persistent_operations.outcome"] = outcome
        if !subject.tags.isEmpty { span.attributes["persistent_operations.tags"] = subject.tags.sorted().joined(separator: ",") }
        if let lane = subject.lane { span.attributes["persistent_operations.lane"] = lane }
        if outcome == "failed" || outcome == "period_failed" || outcome == "retry" {
            span.setStatus(SpanStatus(code: .error, message: failure))
        }
        span.end(at: instant(end))
    }

    private static func instant(_ date: Date) -> DefaultTracerClock.Instant {
        DefaultTracerClock.Instant(nanosecondsSinceEpoch: UInt64(max(0, date.timeIntervalSince1970 * 1e9)))
    }
}
