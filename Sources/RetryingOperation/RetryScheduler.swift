import Foundation

/// Measures the waits before retries: the clock of a ``RetryingOperation``.
///
/// The library asks its scheduler to call an action after a delay and cancels that
/// request when the wait ends early. Production code uses ``DispatchRetryScheduler`` (the
/// default); tests use ``ManualRetryScheduler`` and move time forward themselves. Set one
/// with ``RetryingOperation/retryScheduler``.
///
/// ```swift
/// struct ImmediateScheduler: RetryScheduler {
///     var now: Date { Date() }
///     func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry {
///         DispatchQueue.global().async(execute: action)
///         return NoScheduledRetry()
///     }
/// }
/// ```
public protocol RetryScheduler: Sendable {
    /// The scheduler's current time; used to date the next attempt.
    var now: Date { get }

    /// Calls `action` once, on any thread, `delay` seconds from now — unless the returned
    /// value is cancelled first.
    func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry
}

/// A pending call of a ``RetryScheduler``.
public protocol ScheduledRetry: Sendable {
    /// Makes sure the action is not called (a call already under way may still finish).
    func cancel()
}

/// The default ``RetryScheduler``: a one-shot Dispatch timer per wait, on a global queue.
///
/// Waiting costs no thread and no polling; the retry runs on a Dispatch worker thread.
///
/// ```swift
/// operation.retryScheduler = DispatchRetryScheduler(leeway: .milliseconds(100))
/// ```
public struct DispatchRetryScheduler: RetryScheduler {
    /// The default ``leeway``: one millisecond, so retries start on time.
    public static let defaultLeeway = DispatchTimeInterval.milliseconds(1)
    /// The default ``qualityOfService`` of the timers and of the retries they start.
    public static let defaultQualityOfService = DispatchQoS.QoSClass.utility
    /// The longest wait honoured: about a century. Longer delays are shortened to it.
    public static let longestDelay: TimeInterval = 100 * 365 * 24 * 3600

    /// How late the system may fire a timer to save power. Defaults to ``defaultLeeway``.
    public var leeway: DispatchTimeInterval
    /// The quality of service of the timers. Defaults to ``defaultQualityOfService``.
    public var qualityOfService: DispatchQoS.QoSClass

    /// Creates a scheduler.
    public init(leeway: DispatchTimeInterval = defaultLeeway, qualityOfService: DispatchQoS.QoSClass = defaultQualityOfService) {
        self.leeway = leeway
        self.qualityOfService = qualityOfService
    }

    public var now: Date { Date() }

    public func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry {
        let seconds = delay.isFinite ? min(max(delay, 0), Self.longestDelay) : (delay > 0 ? Self.longestDelay : 0)
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: qualityOfService))
        timer.setEventHandler(handler: action)
        timer.schedule(deadline: .now() + seconds, repeating: .never, leeway: leeway)
        timer.resume()
        return DispatchScheduledRetry(timer: timer)
    }
}

private struct DispatchScheduledRetry: ScheduledRetry, @unchecked Sendable {
    // @unchecked: Dispatch sources are thread-safe; `cancel()` may be called from any thread.
    let timer: any DispatchSourceTimer

    func cancel() {
        timer.cancel()
    }
}
