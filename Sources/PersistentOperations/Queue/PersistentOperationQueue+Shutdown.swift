import Foundation
import RetryingOperation

// Graceful shutdown: stop starting attempts (the `OperationQueue` suspended and kept so, bounded
// runs ended, `State.isShuttingDown` set so that a slot that starts anyway starts nothing), let
// the attempts in flight end by themselves for a grace period, stop the rest as uncounted
// retries (as the end of a bounded run does, `+BoundedRuns`), then close: `close()` waits for
// the store writes under way. A restore in progress is waited for (`graphLock`) and a restore
// after the shutdown began throws, so the store is never closed under a restore.

extension PersistentOperationQueue {
    /// Shuts the queue down gracefully, for a server process that received SIGTERM or an app
    /// about to exit: no new attempt starts; the attempts in flight get `gracePeriod` seconds to
    /// end by themselves; those still running are then stopped as *uncounted* retries
    /// (`RetryingOperation.abandonBaseOperation(_:)` with `AbandonReason.stopped`), their
    /// records saved; then the queue closes (see ``close()``).
    ///
    /// Everything not finished stays pending and runs after the next ``restore()``, with the
    /// retry counts it had. Adds are accepted until the queue closes (they are durable, and run
    /// at the next launch); afterwards they throw ``PersistenceError/Code/storeNotWritable``. A
    /// ``restore()`` in progress is finished first; one called after the shutdown began throws.
    /// Setting ``isSuspended`` to `false` meanwhile is ignored. A second call returns at once
    /// with ``ShutdownReport/wasAlreadyClosed``.
    ///
    /// ```swift
    /// // A worker's SIGTERM handler: finish what is running, within Kubernetes' 30 s.
    /// let report = await queue.shutDown(gracePeriod: 20)
    /// print("stopped \(report.stopped.count), still running \(report.stillRunning.count)")
    /// exit(0)
    /// ```
    ///
    /// Do not call it from an event handler: it waits for the events emitted so far to be
    /// delivered.
    ///
    /// - Parameters:
    ///   - gracePeriod: Seconds of real time the attempts in flight have to end by themselves;
    ///     `.infinity` to wait until they all have. Default:
    ///     ``ShutdownReport/defaultGracePeriod`` (10 s).
    ///   - stopGracePeriod: Seconds of real time, after the grace period, for the stopped
    ///     attempts to end and their records to be saved. Default:
    ///     ``ShutdownReport/defaultStopGracePeriod`` (1 s).
    /// - Returns: What happened to the attempts that were running.
    public func shutDown(
        gracePeriod: TimeInterval = ShutdownReport.defaultGracePeriod,
        stopGracePeriod: TimeInterval = ShutdownReport.defaultStopGracePeriod
    ) async -> ShutdownReport {
        // A thread of its own: the shutdown waits (polling), and must not hold one of the few
        // threads of Swift concurrency's pool or of the global queues that the attempts need.
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(returning: self.shutDownAndWait(gracePeriod: gracePeriod, stopGracePeriod: stopGracePeriod))
            }
        }
    }

    /// ``shutDown(gracePeriod:stopGracePeriod:)`` for synchronous code: blocks the calling
    /// thread until the queue has closed.
    ///
    /// ```swift
    /// signal(SIGTERM, SIG_IGN)
    /// let source = DispatchSource.makeSignalSource(signal: SIGTERM, queue: .main)
    /// source.setEventHandler {
    ///     _ = queue.shutDownAndWait(gracePeriod: 20)
    ///     exit(0)
    /// }
    /// source.resume()
    /// ```
    public func shutDownAndWait(
        gracePeriod: TimeInterval = ShutdownReport.defaultGracePeriod,
        stopGracePeriod: TimeInterval = ShutdownReport.defaultStopGracePeriod
    ) -> ShutdownReport {
        let started = DispatchTime.now()
        var report = ShutdownReport()
        let isFirst = state.withLock { state -> Bool in
            guard !state.isShuttingDown, !state.isClosed else { return false }
            state.isShuttingDown = true
            return true
        }
        guard isFirst else {
            report.wasAlreadyClosed = true
            return report
        }
        log(.info, "shutting down: no attempt starts; \(gracePeriod) s for the attempts in flight to end")
        // The attempts in flight as the shutdown begins (none starts from now on): one that ends
        // while the queue is being suspended ended in the grace period too.
        let inFlight = Set(runningAttempts().map(\.id))
        // 1. Nothing new starts: bounded runs end (leaving their attempts alone), the queue is
        //    suspended, and a restore in progress finishes first.
        let active = runs.withLock { Array($0.values) }
        for run in active { run.end(.queueClosed) }
        for run in active { _ = run.waitUntilFinished() }
        operationQueue.isSuspended = true
        graphLock.lock()
        graphLock.unlock()

        // 2. The attempts in flight end by themselves, or the grace period passes.
        // (An infinite or very long grace period waits until they have all ended; NaN counts as 0.)
        let graceEnd: DispatchTime = gracePeriod > 1e9 ? .distantFuture : started + (gracePeriod > 0 ? gracePeriod : 0)
        while !runningAttempts().isEmpty, DispatchTime.now() < graceEnd {
            usleep(2_000)
        }

        // 3. The rest are stopped as uncounted retries, their records saved.
        let (stopped, stillRunning) = stopAttemptsInFlight(grace: stopGracePeriod)
        report.stopped = stopped.sorted().map { PersistentOperationID(record: $0) }
        report.stillRunning = stillRunning.sorted().map { PersistentOperationID(record: $0) }
        report.endedInGracePeriod = inFlight.subtracting(stopped).subtracting(stillRunning).sorted().map { PersistentOperationID(record: $0) }

        // 4. The store's writes under way end, and the queue closes.
        close()
        report.duration = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        return report
    }
}
