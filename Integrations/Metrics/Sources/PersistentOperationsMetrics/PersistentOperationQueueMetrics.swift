import CoreMetrics
import Dispatch
import Foundation
import PersistentOperations

/// Reports a `PersistentOperationQueue`'s attempts, outcomes, durations and backlog to
/// swift-metrics.
///
/// Create one per queue, before `restore()` to count the restored operations' attempts too,
/// and keep it: it observes the queue's events (through
/// `PersistentOperationQueue.addEventObserver(_:)`, so the app keeps its own event handlers)
/// until ``stop()`` or its deinitialisation.
///
/// ```swift
/// import Metrics
/// import PersistentOperations
/// import PersistentOperationsMetrics
///
/// let queue = try PersistentOperationQueue(directory: storeURL)
/// queue.register(Thumbnail.self)
/// let metrics = PersistentOperationQueueMetrics(queue: queue, dimensions: [("queue", "thumbnails")])
/// try queue.restore()
/// ```
///
/// What it reports, each with the `dimensions` given and those listed (`type` is the
/// operation type's `persistenceIdentifier`; `prefix` defaults to `persistent_operations`):
///
/// | metric | kind | dimensions | what |
/// |---|---|---|---|
/// | `prefix_attempts_total` | counter | `type` | attempts started |
/// | `prefix_outcomes_total` | counter | `type`, `outcome` | ends of attempts and operations (see ``Outcome``) |
/// | `prefix_attempt_duration_seconds` | timer | `type`, `outcome` | how long each attempt ran, to the end `outcome` names |
/// | `prefix_enqueue_to_done_seconds` | timer | `type`, `outcome` | from `addOperation` to success, failure for good or cancellation |
/// | `prefix_operations` | gauge | `state` | operations by state: `pending`, `running`, `waiting_to_retry`, `scheduled`, `queued`, `blocked`, `failed`, `quarantined` |
/// | `prefix_store_errors_total` | counter | | changes the store could not save |
/// | `prefix_quarantined_total` | counter | | stored entries moved to quarantine |
///
/// The gauges are read from `PersistentOperationQueue.counts()` every `gaugeInterval` and on
/// ``updateGauges()``; `counts()` walks the queue's operations, so with a backlog of a
/// million keep the interval at seconds, not milliseconds.
public final class PersistentOperationQueueMetrics: Sendable {
    /// The `outcome` dimension of `prefix_outcomes_total` and the timers.
    public enum Outcome: String, Sendable, CaseIterable {
        /// The operation succeeded; its record was removed.
        case succeeded
        /// The operation failed for good; its record moved to the failed area.
        case failed
        /// The operation was cancelled.
        case cancelled
        /// The attempt ended with a retry that counts toward the retry limit.
        case retry
        /// The attempt ended with a retry that does not count (a stop, a shutdown, a condition).
        case retryUncounted = "retry_uncounted"
        /// A period of a periodic operation succeeded.
        case periodSucceeded = "period_succeeded"
        /// A period of a periodic operation failed for good (the series goes on).
        case periodFailed = "period_failed"
    }

    private let queue: PersistentOperationQueue
    private let prefix: String
    private let dimensions: [(String, String)]
    private let factory: any MetricsFactory
    private let cache: Cache
    private let observation: PersistentOperationQueue.EventObservation
    private let gaugeTimer: GaugeTimer?

    /// Starts reporting `queue`'s metrics.
    ///
    /// - Parameters:
    ///   - queue: The queue to observe.
    ///   - prefix: The start of every metric's label. Default: `persistent_operations`.
    ///   - dimensions: Dimensions added to every metric, such as the queue's name.
    ///   - gaugeInterval: How often the gauges are read from `counts()`; `nil` reads them
    ///     only on ``updateGauges()``. Default: 10 s.
    ///   - factory: Where the metrics go. Default: the bootstrapped `MetricsSystem`.
    public init(
        queue: PersistentOperationQueue,
        prefix: String = "persistent_operations",
        dimensions: [(String, String)] = [],
        gaugeInterval: TimeInterval? = 10,
        factory: any MetricsFactory = MetricsSystem.factory
    ) {
        self.queue = queue
        self.prefix = prefix
        self.dimensions = dimensions
        self.factory = factory
        let cache = Cache(prefix: prefix, dimensions: dimensions, factory: factory)
        self.cache = cache
        observation = queue.addEventObserver { event, subject in
            cache.record(event, subject: subject)
        }
        if let gaugeInterval, gaugeInterval > 0, gaugeInterval.isFinite {
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "PersistentOperationQueueMetrics.gauges"))
            timer.schedule(deadline: .now() + gaugeInterval, repeating: gaugeInterval, leeway: .milliseconds(Int(min(gaugeInterval * 100, 1000))))
            timer.setEventHandler { [weak queue] in
                if let queue { cache.updateGauges(from: queue) }
            }
            timer.resume()
            gaugeTimer = GaugeTimer(timer)
        } else {
            gaugeTimer = nil
        }
    }

    deinit {
        stop()
    }

    /// Reads the queue's counts into the gauges now.
    public func updateGauges() {
        cache.updateGauges(from: queue)
    }

    /// Stops observing the queue and reading its counts. Calling it again does nothing.
    public func stop() {
        observation.cancel()
        gaugeTimer?.source.cancel()
    }
}

/// The timer that reads the gauges.
private final class GaugeTimer: @unchecked Sendable {
    // @unchecked: `source` is set once; a dispatch source may be cancelled from any thread.
    let source: any DispatchSourceTimer

    init(_ source: any DispatchSourceTimer) {
        self.source = source
    }
}

/// The metrics made so far, by label and dimensions: events are recorded on the queue's event
/// queue, gauges on the timer's, each through one lock round trip per metric used.
private final class Cache: @unchecked Sendable {
    // @unchecked: `counters` and `timers` are only touched under `lock`; the rest is immutable.
    private let prefix: String
    private let dimensions: [(String, String)]
    private let factory: any MetricsFactory
    private let lock = NSLock()
    private var counters: [String: Counter] = [:]
    private var timers: [String: CoreMetrics.Timer] = [:]
    private let gauges: [String: Gauge]
    private let storeErrors: Counter
    private let quarantined: Counter

    init(prefix: String, dimensions: [(String, String)], factory: any MetricsFactory) {
        self.prefix = prefix
        self.dimensions = dimensions
        self.factory = factory
        var gauges: [String: Gauge] = [:]
        for state in ["pending", "running", "waiting_to_retry", "scheduled", "queued", "blocked", "failed", "quarantined"] {
            gauges[state] = Gauge(label: "\(prefix)_operations", dimensions: dimensions + [("state", state)], factory: factory)
        }
        self.gauges = gauges
        storeErrors = Counter(label: "\(prefix)_store_errors_total", dimensions: dimensions, factory: factory)
        quarantined = Counter(label: "\(prefix)_quarantined_total", dimensions: dimensions, factory: factory)
    }

    func record(_ event: PersistentOperationEvent, subject: PersistentOperationEvent.Subject?) {
        let outcome: PersistentOperationQueueMetrics.Outcome
        var endsOperation = false
        switch event {
        case .started:
            guard let subject else { return }
            counter("attempts_total", type: subject.typeIdentifier, outcome: nil).increment()
            return
        case .retryScheduled(_, let isCounted, _, _):
            outcome = isCounted ? .retry : .retryUncounted
        case .succeeded:
            outcome = .succeeded
            endsOperation = true
        case .failed:
            outcome = .failed
            endsOperation = true
        case .cancelled:
            outcome = .cancelled
            endsOperation = true
        case .periodEnded(_, let failure, _):
            outcome = failure == nil ? .periodSucceeded : .periodFailed
        case .storeError:
            storeErrors.increment()
            return
        case .quarantined:
            quarantined.increment()
            return
        default:
            return
        }
        // (An operation the queue no longer tracked, such as a record left on disk, has no
        // subject, hence no type: it is not counted.)
        guard let subject else { return }
        counter("outcomes_total", type: subject.typeIdentifier, outcome: outcome).increment()
        if let duration = subject.attemptDuration {
            timer("attempt_duration_seconds", type: subject.typeIdentifier, outcome: outcome)
                .recordNanoseconds(Int64((duration * 1e9).rounded()))
        }
        if endsOperation, let enqueuedAt = subject.enqueuedAt {
            let seconds = max(0, Date().timeIntervalSince(enqueuedAt))
            timer("enqueue_to_done_seconds", type: subject.typeIdentifier, outcome: outcome)
                .recordNanoseconds(Int64((seconds * 1e9).rounded()))
        }
    }

    func updateGauges(from queue: PersistentOperationQueue) {
        guard let counts = try? queue.counts() else { return }
        gauges["pending"]?.record(counts.pending)
        gauges["running"]?.record(counts.running)
        gauges["waiting_to_retry"]?.record(counts.waitingToRetry)
        gauges["scheduled"]?.record(counts.scheduled)
        gauges["queued"]?.record(counts.queued)
        gauges["blocked"]?.record(counts.waitingForPrerequisites + counts.waitingForConditions + counts.waitingForLane)
        gauges["failed"]?.record(counts.failed)
        gauges["quarantined"]?.record(counts.quarantined)
    }

    private func counter(_ name: String, type: String, outcome: PersistentOperationQueueMetrics.Outcome?) -> Counter {
        let key = "\(name)\u{0}\(type)\u{0}\(outcome?.rawValue ?? "")"
        lock.lock()
        defer { lock.unlock() }
        if let counter = counters[key] { return counter }
        var dimensions = self.dimensions + [("type", type)]
        if let outcome { dimensions.append(("outcome", outcome.rawValue)) }
        let counter = Counter(label: "\(prefix)_\(name)", dimensions: dimensions, factory: factory)
        counters[key] = counter
        return counter
    }

    private func timer(_ name: String, type: String, outcome: PersistentOperationQueueMetrics.Outcome) -> CoreMetrics.Timer {
        let key = "\(name)\u{0}\(type)\u{0}\(outcome.rawValue)"
        lock.lock()
        defer { lock.unlock() }
        if let timer = timers[key] { return timer }
        let timer = CoreMetrics.Timer(label: "\(prefix)_\(name)", dimensions: dimensions + [("type", type), ("outcome", outcome.rawValue)], factory: factory)
        timers[key] = timer
        return timer
    }
}
