import Foundation
import PersistentOperations
import ServiceLifecycle

/// A ``PersistentOperationQueue`` run as a swift-service-lifecycle `Service`: it restores what
/// an earlier process left pending, runs the queue, and on graceful shutdown (SIGTERM, SIGINT,
/// or another service ending) shuts the queue down with
/// `PersistentOperationQueue.shutDown(gracePeriod:stopGracePeriod:)`: no new attempt starts,
/// the attempts in flight get the grace period, the rest stop as uncounted retries, and the
/// queue closes.
///
/// ```swift
/// let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: workers)
/// queue.register(MakeThumbnail.self)
/// let service = PersistentOperationQueueService(queue: queue, gracePeriod: 20)
/// let group = ServiceGroup(services: [service], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
///
/// The restore runs on a thread of its own; a shutdown that comes during it waits for it to
/// end, then shuts down. When the service's task is cancelled instead (the group's
/// cancellation), the queue shuts down with no grace period: the attempts in flight are
/// stopped at once.
public struct PersistentOperationQueueService: Service {
    /// The queue the service runs.
    public let queue: PersistentOperationQueue
    /// Seconds the attempts in flight get to end by themselves once shutdown begins.
    public var gracePeriod: TimeInterval
    /// Seconds the stopped attempts get to end and have their records saved.
    public var stopGracePeriod: TimeInterval
    /// Whether ``run()`` calls `restore()` first. Default: `true`.
    public var restoresOnStart: Bool

    /// Called with the shutdown's report, before ``run()`` returns.
    public var onShutdown: (@Sendable (ShutdownReport) -> Void)?

    /// Creates the service.
    ///
    /// - Parameters:
    ///   - queue: The queue to run; register its operation types before the group runs.
    ///   - gracePeriod: Default: `ShutdownReport.defaultGracePeriod` (10 s).
    ///   - stopGracePeriod: Default: `ShutdownReport.defaultStopGracePeriod` (1 s).
    ///   - restoresOnStart: Whether ``run()`` restores the stored operations first.
    ///   - onShutdown: Receives the shutdown's report.
    public init(
        queue: PersistentOperationQueue,
        gracePeriod: TimeInterval = ShutdownReport.defaultGracePeriod,
        stopGracePeriod: TimeInterval = ShutdownReport.defaultStopGracePeriod,
        restoresOnStart: Bool = true,
        onShutdown: (@Sendable (ShutdownReport) -> Void)? = nil
    ) {
        self.queue = queue
        self.gracePeriod = gracePeriod
        self.stopGracePeriod = stopGracePeriod
        self.restoresOnStart = restoresOnStart
        self.onShutdown = onShutdown
    }

    /// Restores (unless ``restoresOnStart`` is `false`), resumes the queue, waits for graceful
    /// shutdown, then shuts the queue down and returns.
    ///
    /// - Throws: The error of `restore()`, after the queue was shut down.
    public func run() async throws {
        var restoreError: (any Error)?
        if restoresOnStart {
            let queue = self.queue
            restoreError = await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    do {
                        try queue.restore()
                        continuation.resume(returning: nil)
                    } catch {
                        continuation.resume(returning: error)
                    }
                }
            }
        }
        var grace = gracePeriod
        if restoreError == nil {
            queue.isSuspended = false
            do {
                try await gracefulShutdown()
            } catch {
                grace = 0   // cancelled: stop at once
            }
        }
        let report = await queue.shutDown(gracePeriod: grace, stopGracePeriod: stopGracePeriod)
        onShutdown?(report)
        if let restoreError { throw restoreError }
    }
}
