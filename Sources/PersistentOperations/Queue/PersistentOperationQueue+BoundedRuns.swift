import Foundation
import RetryingOperation

// Bounded runs: the queue resumed for a window that ends at a deadline, at `stop()`, or when
// nothing more can start before the run's horizon (the earlier of its deadline and its idle
// limit from the moment of the check). The active runs sit in `runs`; the end of the
// last one suspends the `OperationQueue` and stops the `RetryingOperation` attempts in flight
// (`RetryingOperation.stopAttempt()`: an uncounted retry, its record rewritten by the usual
// `operationWillWait`), waiting for those records at most the run's grace period. A slot the
// `OperationQueue` starts while suspended (it raced with the suspension) gives its place back
// (see `+Slots`). Whether a run has drained is checked after every slot leaves and every
// entry is forgotten, on the events' queue.

extension PersistentOperationQueue {
    /// Runs due work until `deadline`, until the returned run is stopped, or until nothing
    /// more can start before the deadline or within `idleLimit` — then suspends the queue.
    /// See ``BoundedRun``.
    ///
    /// The queue is resumed (`isSuspended = false`) when the run starts and suspended when it
    /// ends: after it, nothing starts until you resume the queue or start another run. Call it
    /// after ``restore()``.
    ///
    /// ```swift
    /// let run = queue.startBoundedRun(until: .distantFuture)   // until stopped, or idle
    /// task.expirationHandler = { run.stop() }
    /// let report = await run.report
    /// ```
    ///
    /// - Parameters:
    ///   - deadline: When the run ends at the latest, on the queue's clock
    ///     (``Configuration/scheduler``); `.distantFuture` to run until stopped or idle.
    ///   - idleLimit: The run ends, ``BoundedRunReport/Ending-swift.enum/drained`` or
    ///     ``BoundedRunReport/Ending-swift.enum/blocked``, as soon as no attempt runs or waits
    ///     for a slot and nothing can start within this many seconds (on the queue's clock),
    ///     even before `deadline`; `.infinity` to look as far as the deadline. A negative or
    ///     NaN limit counts as 0. Default: ``BoundedRun/defaultIdleLimit`` (30 seconds).
    ///   - stopGracePeriod: How long, at most, the end of the run waits (in real time) for the
    ///     attempts it stops to end and their records to be saved before the report is made.
    ///     Default: ``BoundedRun/defaultStopGracePeriod`` (1 second).
    public func startBoundedRun(
        until deadline: Date,
        idleLimit: TimeInterval = BoundedRun.defaultIdleLimit,
        stopGracePeriod: TimeInterval = BoundedRun.defaultStopGracePeriod
    ) -> BoundedRun {
        startBoundedRun(scope: nil, reportingTo: nil, until: deadline, idleLimit: idleLimit, stopGracePeriod: stopGracePeriod)
    }

    /// Runs the due work of one group — a tag, a lane — and nothing else, until it is done,
    /// `deadline`, or the returned run is stopped, and feeds `progress` (a task's, shown to
    /// the person) from the group's progress: what a `BGContinuedProcessingTask` handler
    /// needs (iOS 26: work the person started, with its progress in the system's UI).
    ///
    /// It is ``startBoundedRun(until:idleLimit:stopGracePeriod:)`` with a focus: while it is
    /// active, only operations of `scope` start; the others' due work waits, reported
    /// ``PersistentOperationInfo/State-swift.enum/queued``, and goes on when the run ends
    /// (once the queue is resumed). Runs may overlap: while any active run is not of a scope
    /// the whole queue works, and while several of scopes are, each scope's work starts. The
    /// run ends ``BoundedRunReport/Ending-swift.enum/drained`` once the scope's work that was
    /// due has run (the other work waiting does not make it `.blocked`). Stopped attempts end
    /// as uncounted retries, as a bounded run's do.
    ///
    /// `progress` gets the units of ``progress(for:)`` of `scope` — 1,000 an operation, the
    /// group's pending operations and those that ended since it was first asked for — at
    /// the run's start and at each of the group's updates (at most every
    /// ``Configuration/progressInterval``) until the run ends, so that the system sees it move
    /// while uploads report their bytes.
    ///
    /// Apple platforms, iOS 26 (shown as text: the library has no BackgroundTasks code; the
    /// README's copy of it is compiled and run by the tests against stand-ins with the
    /// framework's names):
    ///
    /// ```text
    /// BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.export", using: nil) { task in
    ///     guard let task = task as? BGContinuedProcessingTask else { return }
    ///     let run = queue.startBoundedRun(of: .tag("export"), reportingTo: task.progress)
    ///     task.expirationHandler = { run.stop() }   // the person cancelled, or the system ended it
    ///     Task {
    ///         let report = await run.report
    ///         task.setTaskCompleted(success: report.ending == .drained)
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - scope: The operations to run.
    ///   - progress: A progress to keep up to date, such as the task's; `nil` for none.
    ///   - deadline: As in ``startBoundedRun(until:idleLimit:stopGracePeriod:)``;
    ///     `.distantFuture` (the default) to run until the work is done or the run stopped.
    ///   - idleLimit: As there.
    ///   - stopGracePeriod: As there.
    public func startBoundedRun(
        of scope: ProgressScope,
        reportingTo progress: Progress? = nil,
        until deadline: Date = .distantFuture,
        idleLimit: TimeInterval = BoundedRun.defaultIdleLimit,
        stopGracePeriod: TimeInterval = BoundedRun.defaultStopGracePeriod
    ) -> BoundedRun {
        startBoundedRun(scope: scope, reportingTo: progress, until: deadline, idleLimit: idleLimit, stopGracePeriod: stopGracePeriod)
    }

    private func startBoundedRun(
        scope: ProgressScope?, reportingTo progress: Progress?, until deadline: Date, idleLimit: TimeInterval, stopGracePeriod: TimeInterval
    ) -> BoundedRun {
        let idleLimit = idleLimit >= 0 ? idleLimit : 0   // (NaN too)
        let run = BoundedRun(
            queue: self, deadline: deadline, idleLimit: idleLimit, stopGracePeriod: stopGracePeriod, startedAt: timer.now,
            scope: scope, reportedProgress: progress
        )
        let key = ObjectIdentifier(run)
        guard state.withLock({ !$0.isClosed && !$0.isShuttingDown }) else {
            run.end(.queueClosed)
            return run
        }
        if let scope {
            // The group's progress exists before the run's first event, and the run's
            // progress starts from its counts.
            _ = self.progress(for: scope)
            if let progress { setCurrentUnits(of: scope, on: progress) }
        }
        // Registered on the events' queue: events emitted before the run started, not yet
        // delivered, are not counted as the run's.
        hub.addMonitor(key) { [weak run] event in run?.observe(event) }
        // Registered, focused and resumed in one step, so that the end of another run cannot
        // suspend the queue or change the focus in between (see `finishRun`).
        runTransitions.lock()
        let scopes = runs.withLock { runs in
            runs[key] = run
            return runs.values.map(\.scope)
        }
        let slots = refocus(on: scopes)
        operationQueue.isSuspended = false
        runTransitions.unlock()
        for slot in slots {
            operationQueue.addOperation(slot)
        }
        if deadline < .distantFuture {
            let token = timer.schedule(at: deadline) { [weak run] in run?.end(.deadlineReached) }
            let isOver = run.core.withLock { core -> Bool in
                guard core.ending == nil else { return true }
                core.deadlineTimer = token
                return false
            }
            if isOver { token.cancel() }
        }
        // Nothing may be due at all: check once the queue has had the events so far.
        hub.deliver { [weak self, weak run] in
            guard let self, let run else { return }
            self.checkDrained(run)
        }
        return run
    }

    /// Runs due work until `deadline`, until nothing can start before it or within
    /// `idleLimit`, or until the awaiting task is cancelled, and returns the report:
    /// ``startBoundedRun(until:idleLimit:stopGracePeriod:)`` for async code.
    ///
    /// ```swift
    /// let report = await queue.run(until: Date().addingTimeInterval(25))
    /// ```
    public func run(
        until deadline: Date,
        idleLimit: TimeInterval = BoundedRun.defaultIdleLimit,
        stopGracePeriod: TimeInterval = BoundedRun.defaultStopGracePeriod
    ) async -> BoundedRunReport {
        let run = startBoundedRun(until: deadline, idleLimit: idleLimit, stopGracePeriod: stopGracePeriod)
        return await withTaskCancellationHandler {
            await run.report
        } onCancel: {
            run.stop()
        }
    }

    /// Something changed that may leave a run with nothing to do: check, on the events' queue
    /// (after the events emitted so far), when a run is active.
    func noteRunProgress() {
        guard runs.withLock({ !$0.isEmpty }) else { return }
        hub.deliver { [weak self] in
            guard let self else { return }
            for run in self.runs.withLock({ Array($0.values) }) {
                self.checkDrained(run)
            }
        }
    }

    /// Ends `run` when nothing more can start before its horizon: the earlier of its deadline
    /// and its idle limit from now.
    private func checkDrained(_ run: BoundedRun) {
        let now = timer.now
        let horizon = run.idleLimit.isFinite ? min(run.deadline, now.addingTimeInterval(run.idleLimit)) : run.deadline
        guard hasNothingDue(before: horizon, now: now) else { return }
        run.end(blockedOperationCount() > 0 ? .blocked : .drained)
    }

    /// The key under which due work out of the focus of the active runs of scopes is parked.
    static let focusKey = "\u{1}focus"

    /// Under the lock: whether the operation stored as `record` is out of the focus of the
    /// active runs of scopes (none is while no focus is set).
    func isOutOfFocus(_ record: OperationRecord, in state: State) -> Bool {
        guard let focus = state.focus else { return false }
        return !focus.contains { $0.contains(record) }
    }

    /// The units of the group of `scope` as its counts are now (its `Progress` may be an
    /// update behind), set on `progress`: where a run of the scope starts its task's progress,
    /// and its last word at the end.
    private func setCurrentUnits(of scope: ProgressScope, on progress: Progress) {
        let units = state.withLock { state in state.progressGroups.groups[scope].map { ($0.totalUnits, $0.completedUnits) } }
        guard let (total, completed) = units else { return }
        progress.totalUnitCount = total
        progress.completedUnitCount = completed
    }

    /// With `runTransitions` held: sets the focus to `scopes`, those of the active runs —
    /// none when one of them is not of a scope, or none is active — and, when it changed from
    /// one focus, looks at the work that one held again (each entry out of the new focus is
    /// parked again). Returns the slots to queue.
    private func refocus(on scopes: [ProgressScope?]) -> [AttemptSlot] {
        let focus: Set<ProgressScope>? = scopes.isEmpty || scopes.contains(where: { $0 == nil }) ? nil : Set(scopes.compactMap { $0 })
        let window = slotWindow()
        return state.withLock { state -> [AttemptSlot] in
            let old = state.focus
            state.focus = focus
            guard let old, old != focus else { return [] }
            // (Narrowed or changed: what it held is looked at again under the new one.)
            return releaseParked(under: Self.focusKey, in: &state, window: window)
        }
    }

    /// Whether nothing runs or waits for a slot, and nothing waiting on a date becomes due
    /// before `deadline`. Operations waiting for prerequisites or run conditions do not count.
    func hasNothingDue(before deadline: Date, now: Date) -> Bool {
        state.withLock { state -> Bool in
            if state.slotsInQueue > 0 { return false }
            return !state.entries.values.contains { entry in
                if isOutOfFocus(entry.record, in: state) {
                    // Not the work of the active runs of scopes: it waits for them to end.
                    if case .running = entry.phase { return true }
                    return false
                }
                switch entry.phase {
                case .running: return true
                case .waitingForConditions: return startsByRate(entry, by: deadline, now: now, in: state)
                default: return Self.startsByTime(entry, by: deadline, now: now)
                }
            }
        }
    }

    /// How many entries are due but wait for something other than time: a run condition, or a
    /// retry helper that is not a timer. Entries waiting for prerequisites are not counted.
    private func blockedOperationCount() -> Int {
        state.withLock { state in
            state.entries.values.reduce(0) { count, entry in
                switch entry.phase {
                case .waitingForConditions:
                    // (Out of the focus of a run of a scope: not that run's work.)
                    return entry.parkedUnder == Self.focusKey ? count : count + 1
                case .waitingToRetry where entry.pendingAdmission == nil && entry.record.nextAttemptAt == nil:
                    return count + 1
                default:
                    return count
                }
            }
        }
    }

    /// Whether `entry` may start an attempt by `date` with nothing but time and a slot: it waits
    /// for a slot, or its not-before or retry date is not after `date`. Running entries, and
    /// entries waiting for prerequisites, run conditions or a retry helper other than a timer,
    /// do not.
    private static func startsByTime(_ entry: Entry, by date: Date, now: Date) -> Bool {
        switch entry.phase {
        case .ready, .queued:
            return true
        case .scheduled:
            return (entry.record.dueDate ?? now) <= date
        case .waitingToRetry:
            return entry.pendingAdmission != nil || entry.record.nextAttemptAt.map { $0 <= date } == true
        case .running, .blocked, .waitingForConditions:
            return false
        }
    }

    /// The end of `run` (on a background thread): unless another run is active, suspends the
    /// queue and stops the attempts in flight (a drained run has none), then makes the report.
    func finishRun(_ run: BoundedRun, ending: BoundedRunReport.Ending) -> BoundedRunReport {
        let key = ObjectIdentifier(run)
        runTransitions.lock()
        let scopes = runs.withLock { runs in
            runs.removeValue(forKey: key)
            return runs.values.map(\.scope)
        }
        let isLast = scopes.isEmpty
        let slots = refocus(on: scopes)
        if isLast { operationQueue.isSuspended = true }
        runTransitions.unlock()
        for slot in slots {
            operationQueue.addOperation(slot)
        }
        var stopped: [String] = []
        var stillRunning: [String] = []
        if isLast {
            if ending == .deadlineReached || ending == .stopped {
                (stopped, stillRunning) = stopAttemptsInFlight(grace: run.stopGracePeriod)
            } else {
                stillRunning = runningAttempts().map(\.id)
            }
        }
        // The events of everything that happened until now are counted.
        hub.flush()
        hub.removeMonitor(key)
        if let scope = run.scope, let progress = run.reportedProgress {
            // Where the group is now, not at its last update: the task's last word.
            setCurrentUnits(of: scope, on: progress)
        }
        var report = run.core.withLock { $0.tally }
        report.ending = ending
        report.endedAt = timer.now
        report.stopped = stopped.sorted().map { PersistentOperationID(record: $0) }
        report.stillRunning = stillRunning.sorted().map { PersistentOperationID(record: $0) }
        report.dueOperations = dueOperationCount()
        report.blockedOperations = blockedOperationCount()
        report.nextDueDate = nextDueDate
        if !report.stillRunning.isEmpty {
            // Their records stay pending and run again if the app is killed meanwhile: the next
            // background run is wanted at once.
            report.nextDueDate = min(report.nextDueDate ?? report.endedAt, report.endedAt)
        }
        return report
    }

    /// The entries whose attempt runs in a slot, or whose retry's record is being saved, with
    /// their operations.
    func runningAttempts() -> [(id: String, operation: Operation)] {
        state.withLock { state in
            state.entries.compactMap { id, entry in
                guard let operation = entry.operation else { return nil }
                if case .running(let slot) = entry.phase, slot != nil { return (id, operation) }
                return state.retriesBeingSaved.contains(id) ? (id, operation) : nil
            }
        }
    }

    /// Stops every `RetryingOperation` attempt in flight, and the ones whose slot raced with
    /// the suspension, until none runs or `grace` has passed. Returns the stopped entries, and
    /// those still running (plain operations, and attempts that did not end in time).
    func stopAttemptsInFlight(grace: TimeInterval) -> (stopped: [String], stillRunning: [String]) {
        let limit = DispatchTime.now() + grace
        var stopped = Set<String>()
        var running: [(id: String, operation: Operation)] = []
        while true {
            // A run started meanwhile has resumed the queue: its attempts are left alone.
            if runs.withLock({ !$0.isEmpty }) { break }
            running = runningAttempts()
            var waitsFor = 0
            for (id, operation) in running {
                guard let retrying = operation as? RetryingOperation else { continue }
                waitsFor += 1
                if !stopped.contains(id), retrying.stopAttempt() { stopped.insert(id) }
            }
            if waitsFor == 0 || DispatchTime.now() >= limit { break }
            usleep(2_000)
        }
        let stillRunning = running.map(\.id)
        if !stillRunning.isEmpty {
            log(.warning, "\(stillRunning.count) attempt(s) still running after the stop (plain operations, or attempts that did not end within \(grace) s); their records stay pending")
        }
        return (Array(stopped.subtracting(stillRunning)), stillRunning)
    }

    /// How many entries could start now, but for a suspended queue.
    private func dueOperationCount() -> Int {
        let now = timer.now
        return state.withLock { state in
            state.entries.values.reduce(0) { count, entry in Self.startsByTime(entry, by: now, now: now) ? count + 1 : count }
        }
    }

    /// Ends the active runs because the queue closes: attempts go on, unmanaged.
    func endRunsForClose() {
        for run in runs.withLock({ Array($0.values) }) {
            run.end(.queueClosed)
        }
    }
}
