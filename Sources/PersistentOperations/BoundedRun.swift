import Foundation

/// A run of a ``PersistentOperationQueue`` bounded by a deadline or a call to ``stop()`` — what
/// an app hands to a background task, which the system may end at any moment.
///
/// Start one with ``PersistentOperationQueue/startBoundedRun(until:idleLimit:stopGracePeriod:)``.
/// The queue runs due work until the first of:
/// - the deadline passes (``BoundedRunReport/Ending-swift.enum/deadlineReached``),
/// - ``stop()`` is called — from the background task's expiration handler, say
///   (``BoundedRunReport/Ending-swift.enum/stopped``),
/// - nothing more can start before the run's *horizon*, the earlier of its deadline and
///   ``idleLimit`` seconds from now (30 by default): no attempt runs or waits for a slot, and
///   no not-before date, retry timer or periodic window falls before the horizon. Operations
///   waiting for run conditions or prerequisites do not keep a run going. The run then ends
///   ``BoundedRunReport/Ending-swift.enum/blocked`` when due work is left that waits for
///   something other than time (a run condition that does not hold, or a retry helper that is
///   not a timer), and ``BoundedRunReport/Ending-swift.enum/drained`` when everything that was
///   due ran; either way ``BoundedRunReport/nextDueDate`` says when to ask for the next run.
///   So a run until `.distantFuture` ends by itself when the work left is due minutes away.
///
/// A run starts whatever is due while it lasts, also just before its deadline: an attempt
/// that cannot finish in time is stopped like the others, at no cost to its retry budget.
/// Stopping *abandons* an attempt: end your attempts with
/// `baseOperationEnded(attempt:with:)`, so that a stopped attempt's late callback is ignored
/// rather than taken for the end of its next attempt (see `RetryingOperation`'s
/// `abandonBaseOperation(_:)`).
///
/// When a run ends, the queue is suspended (``PersistentOperationQueue/isSuspended``) and
/// stays suspended: set `isSuspended = false` when the app is back in the foreground, or start
/// another run. Ending by the deadline or ``stop()`` also stops every `RetryingOperation`
/// attempt in flight: each one ends as an **uncounted** retry — its record is rewritten, no
/// retry budget is spent, its `abandonBaseOperation(_:)` (by default `cancelBaseOperation()`)
/// is called with `.stopped`, and its next attempt, in this launch or the next, is passed
/// `isRetry: true`. Nothing new starts. ``report`` is ready once those records are saved, or
/// after the stop grace period at the latest (a synchronous attempt holds its thread until it
/// returns; a plain `Operation` cannot be stopped: both are listed in
/// ``BoundedRunReport/stillRunning``, and their records stay pending).
///
/// Apple platforms, a `BGProcessingTask` handler: a success only when the run drained, and a
/// request for the next run whenever work is left (shown as text: the library has no
/// BackgroundTasks code; the README's copy of it is compiled and run by the tests against
/// stand-ins with the framework's names):
///
/// ```text
/// BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.uploads", using: nil) { task in
///     let run = queue.startBoundedRun(until: .distantFuture)   // until stopped, or idle for 30 s
///     task.expirationHandler = { run.stop() }                  // the system wants its time back
///     Task {
///         let report = await run.report
///         if let next = report.nextDueDate {   // work left: due now (blocked, cut short) or later
///             let request = BGProcessingTaskRequest(identifier: "com.example.uploads")
///             request.earliestBeginDate = next
///             request.requiresNetworkConnectivity = true
///             try? BGTaskScheduler.shared.submit(request)
///         }
///         // A success only when everything due ran: not when work waits for the network
///         // (.blocked), nor when the run was cut short (.stopped, .deadlineReached)
///         task.setTaskCompleted(success: report.ending == .drained)
///     }
/// }
/// ```
///
/// Runs may overlap (two background tasks): the queue works while any is active, and only
/// the end of the last one suspends it and stops the attempts in flight.
public final class BoundedRun: @unchecked Sendable {
    // @unchecked: mutable state lives in `core` (a `Locked`); `finished` is a DispatchGroup;
    // the other properties are set in `init` only.

    struct Core {
        var ending: BoundedRunReport.Ending?
        var report: BoundedRunReport?
        var tally = BoundedRunReport()
        var deadlineTimer: (any ScheduledRetry)?
        /// The tasks awaiting ``BoundedRun/report``, resumed by the thread that makes it.
        var reportWaiters: [CheckedContinuation<BoundedRunReport, Never>] = []
    }

    /// When the run ends at the latest, on the queue's clock.
    public let deadline: Date
    /// How far ahead the run looks for work once it has nothing to run: it ends when nothing
    /// can start within this many seconds (on the queue's clock), even before its
    /// ``deadline``. See ``defaultIdleLimit``.
    public let idleLimit: TimeInterval
    /// How long a stop waits, at most, for the attempts in flight to end and their records to be saved.
    public let stopGracePeriod: TimeInterval

    /// The default ``idleLimit``: 30 seconds.
    ///
    /// Thirty seconds is the whole of the background time iOS grants a `BGAppRefreshTask`,
    /// and of a `beginBackgroundTask(expirationHandler:)` window: work due later than that does
    /// not start in the time an app is usually given. A `BGProcessingTask` may last several
    /// minutes, but the system does not say how long: a run that waits idle for work due
    /// minutes away mostly ends in the task's expiration handler instead of finishing, with
    /// nothing done meanwhile. Ending the run and asking for another at its report's
    /// ``BoundedRunReport/nextDueDate`` costs nothing and lets the system schedule it.
    ///
    /// ```swift
    /// // A processing task that may wait up to two minutes for the next retry or period
    /// let run = queue.startBoundedRun(until: .distantFuture, idleLimit: 120)
    /// ```
    public static let defaultIdleLimit: TimeInterval = 30
    /// The default ``stopGracePeriod``: 1 second. A stop usually comes from an expiration
    /// handler, called when the system wants its time back: the report must not keep it waiting.
    public static let defaultStopGracePeriod: TimeInterval = 1
    /// The operations the run starts, for a run of a scope
    /// (``PersistentOperationQueue/startBoundedRun(of:reportingTo:until:idleLimit:stopGracePeriod:)``);
    /// `nil` for a run of the whole queue.
    public let scope: PersistentOperationQueue.ProgressScope?
    /// The progress the run keeps up to date from its scope's (see `observe`).
    let reportedProgress: Progress?
    let core = Locked(Core())
    let finished = DispatchGroup()
    weak var queue: PersistentOperationQueue?

    init(
        queue: PersistentOperationQueue, deadline: Date, idleLimit: TimeInterval, stopGracePeriod: TimeInterval, startedAt: Date,
        scope: PersistentOperationQueue.ProgressScope? = nil, reportedProgress: Progress? = nil
    ) {
        self.queue = queue
        self.deadline = deadline
        self.idleLimit = idleLimit
        self.stopGracePeriod = stopGracePeriod
        self.scope = scope
        self.reportedProgress = reportedProgress
        core.withLock { $0.tally.startedAt = startedAt }
        finished.enter()
    }

    /// Ends the run now, as its deadline would: the attempts in flight end as uncounted retries
    /// and nothing new starts. Returns at once (it never waits for the attempts); ``report``
    /// says when everything is saved. Safe to call from any thread, more than once, and after
    /// the run ended.
    ///
    /// ```swift
    /// let run = queue.startBoundedRun(until: .distantFuture)
    /// task.expirationHandler = { run.stop() }     // the system's background time is up
    /// ```
    public func stop() {
        end(.stopped)
    }

    /// Whether the run has ended and its report is ready.
    public var isFinished: Bool {
        core.withLock { $0.report != nil }
    }

    /// The report, once the run has ended and the attempts it stopped are saved (awaits that).
    ///
    /// ```swift
    /// let run = queue.startBoundedRun(until: Date().addingTimeInterval(25))
    /// let report = await run.report
    /// print("\(report.succeeded.count) done, next due \(report.nextDueDate.map { "\($0)" } ?? "never")")
    /// ```
    public var report: BoundedRunReport {
        get async {
            // Resumed by the thread that makes the report, with no hop through a global
            // queue: on Linux, its few threads are also those of Swift concurrency's pool, which
            // blocking work elsewhere in the process may be holding.
            await withCheckedContinuation { (continuation: CheckedContinuation<BoundedRunReport, Never>) in
                let ready = core.withLock { core -> BoundedRunReport? in
                    if let report = core.report { return report }
                    core.reportWaiters.append(continuation)
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }

    /// Blocks until the run has ended and returns its report (see ``report``).
    @available(*, noasync, message: "Use `await run.report` from async code")
    public func waitUntilFinished() -> BoundedRunReport {
        finished.wait()
        return core.withLock { $0.report! }
    }

    /// Ends the run with `ending` unless it has ended already; the rest happens on a thread of
    /// its own (this may be called on the events' queue or the timer's thread).
    func end(_ ending: BoundedRunReport.Ending) {
        let timer = core.withLock { core -> (any ScheduledRetry)?? in
            guard core.ending == nil else { return nil }
            core.ending = ending
            defer { core.deadlineTimer = nil }
            return .some(core.deadlineTimer)
        }
        guard let timer else { return }
        timer?.cancel()
        // A thread of its own: the end waits (polling) for the stopped attempts, and must not
        // hold one of the few threads of the global queues that those attempts need.
        Thread.detachNewThread { [self] in
            var report: BoundedRunReport
            if let queue {
                report = queue.finishRun(self, ending: ending)
            } else {
                report = core.withLock { $0.tally }
                report.ending = ending
            }
            let waiters = core.withLock { core in
                core.report = report
                defer { core.reportWaiters = [] }
                return core.reportWaiters
            }
            finished.leave()
            for waiter in waiters { waiter.resume(returning: report) }
        }
    }

    /// Counts an event of the queue while the run is active (on the events' queue).
    func observe(_ event: PersistentOperationEvent) {
        if let reportedProgress, let scope, case .progress(scope, let fraction, let operations) = event, !isFinished {
            // (On the events' queue, never under a lock.)
            let total = Int64(operations) * PersistentOperationQueue.ProgressGroups.unitsPerOperation
            reportedProgress.totalUnitCount = total
            reportedProgress.completedUnitCount = Int64((fraction * Double(total)).rounded())
        }
        // Counted until the report is made: what happened up to the end of the run.
        core.withLock { core in
            switch event {
            case .started: core.tally.attemptsStarted += 1
            case .succeeded(let id): core.tally.succeeded.append(id)
            case .failed(let id, _): core.tally.failed.append(id)
            case .periodEnded(let id, _, _): core.tally.periodsEnded.append(id)
            case .retryScheduled(let id, _, _, _): core.tally.retriesScheduled.append(id)
            default: break
            }
        }
    }
}

/// What a ``BoundedRun`` did, and what is left.
///
/// ```swift
/// let report = await queue.run(until: Date().addingTimeInterval(25))
/// if let next = report.nextDueDate { scheduleAnotherRun(earliest: next) }   // more work, now or later
/// ```
public struct BoundedRunReport: Sendable, Hashable {
    /// Why the run ended.
    ///
    /// Only ``drained`` means that everything due was done:
    ///
    /// ```swift
    /// let report = await queue.run(until: .distantFuture)
    /// switch report.ending {
    /// case .drained: print("everything due ran; more from \(report.nextDueDate.map { "\($0)" } ?? "never")")
    /// case .blocked: print("\(report.blockedOperations) operation(s) wait for a run condition")
    /// case .deadlineReached, .stopped, .queueClosed: print("cut short: \(report.dueOperations) still due")
    /// }
    /// ```
    public enum Ending: Sendable, Hashable {
        /// Everything that was due ran: nothing more could start before the run's horizon (its
        /// deadline, or its idle limit from then), and no due operation waits for anything
        /// but time. What is left, if anything, is due at ``BoundedRunReport/nextDueDate``.
        /// Attempts were not interrupted.
        case drained
        /// Nothing more could start, but due work is left that waits for something other than
        /// time: a run condition that does not hold (no network, say) or a retry helper that
        /// is not a timer (``BoundedRunReport/blockedOperations``). Operations waiting for
        /// run conditions count as due at once in ``BoundedRunReport/nextDueDate``. Attempts
        /// were not interrupted.
        case blocked
        /// The deadline passed; the attempts in flight were stopped.
        case deadlineReached
        /// ``BoundedRun/stop()`` was called (or the awaiting task was cancelled); the attempts
        /// in flight were stopped.
        case stopped
        /// The queue was closed: attempts in flight go on, their outcome no longer saved.
        case queueClosed
    }

    /// Why the run ended.
    public var ending: Ending = .drained
    /// When the run started, on the queue's clock.
    public var startedAt = Date.distantPast
    /// When the run ended — the report was made — on the queue's clock.
    public var endedAt = Date.distantPast
    /// Attempts started during the run.
    public var attemptsStarted = 0
    /// Operations that succeeded during the run (their records removed).
    public var succeeded: [PersistentOperationID] = []
    /// Operations that failed for good during the run (moved to the failed area).
    public var failed: [PersistentOperationID] = []
    /// Periodic operations whose period ended during the run (rescheduled for the next one).
    public var periodsEnded: [PersistentOperationID] = []
    /// One entry per retry scheduled during the run (an operation may appear more than once),
    /// the uncounted retries of stopped attempts included.
    public var retriesScheduled: [PersistentOperationID] = []
    /// Attempts the end of the run stopped: each ended as an uncounted retry, its record saved.
    public var stopped: [PersistentOperationID] = []
    /// Attempts still running when the report was made: plain `Operation`s (they cannot be
    /// stopped) and attempts that did not end within the stop grace period (a synchronous
    /// attempt ends when it returns). Their records stay pending: if the process is suspended
    /// and killed, they run again after the next ``PersistentOperationQueue/restore()``.
    public var stillRunning: [PersistentOperationID] = []
    /// Operations that could start now but for the end of the run (waiting for a slot, due,
    /// or due to retry — the stopped attempts included). Operations waiting for run conditions
    /// or prerequisites are not counted.
    public var dueOperations = 0
    /// Operations due but waiting, when the run ended, for something other than time: a run
    /// condition that does not hold, or a retry helper that is not a timer. Operations waiting
    /// for their prerequisites are not counted (their prerequisites are).
    public var blockedOperations = 0
    /// ``PersistentOperationQueue/nextDueDate`` when the run ended: the earliest start to ask
    /// the system for the next background run; `nil` when nothing becomes due by time alone.
    /// When ``stillRunning`` is not empty it is ``endedAt`` at the latest: those records stay
    /// pending, and run again only in a later run or launch.
    public var nextDueDate: Date?

    /// Creates an empty report.
    public init() {}
}
