import Foundation

/// What ``PersistentOperationQueue/shutDown(gracePeriod:stopGracePeriod:)`` did: which of the
/// attempts running when it began ended by themselves, which it stopped, and which were still
/// running when the queue closed.
///
/// Every operation not finished stays pending in the store and runs again after the next
/// ``PersistentOperationQueue/restore()``. A stopped attempt ended as an *uncounted* retry: the
/// next launch runs it with `isRetry: true`, its retry budget untouched.
///
/// ```swift
/// let report = await queue.shutDown(gracePeriod: 25)
/// print("\(report.endedInGracePeriod.count) ended, \(report.stopped.count) stopped")
/// ```
public struct ShutdownReport: Sendable, Equatable {
    /// Attempts running when the shutdown began that ended by themselves within the grace
    /// period: their outcome (success, failure or a retry) was saved.
    public var endedInGracePeriod: [PersistentOperationID] = []
    /// Attempts stopped once the grace period was over
    /// (`RetryingOperation.abandonBaseOperation(_:)` with `AbandonReason.stopped`): they ended as
    /// uncounted retries, their records saved.
    public var stopped: [PersistentOperationID] = []
    /// Attempts still running when the queue closed: plain `Operation`s, which cannot be
    /// stopped, and attempts that did not end within the stop grace period. Their records stay
    /// pending as they were; their outcome, if it comes, is not saved.
    public var stillRunning: [PersistentOperationID] = []
    /// Whether the queue was already closed (or shutting down) when called: nothing was done.
    public var wasAlreadyClosed = false
    /// How long the shutdown took, in seconds of real time.
    public var duration: TimeInterval = 0

    /// The default grace period: ten seconds for the attempts in flight to end by themselves
    /// (Kubernetes sends SIGKILL 30 seconds after SIGTERM by default; systemd 90).
    public static let defaultGracePeriod: TimeInterval = 10
    /// The default stop grace period: one second for the stopped attempts to end and their
    /// records to be saved.
    public static let defaultStopGracePeriod: TimeInterval = 1

    public init() {}
}
