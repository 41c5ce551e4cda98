import Foundation
import Testing
@testable import PersistentOperations

/// A synchronous retrying operation whose attempt blocks its thread until the test lets it go
/// (or 55 s pass: longer than the test may take on a loaded machine, shorter than its time
/// limit), then reports success: an attempt a stop cannot end early.
final class BlockingSyncUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.blocking-sync-upload"
    static let release = DispatchSemaphore(value: 0)
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "\(payload.name)#\(numberOfAttempts) retry=\(isRetry)")
        _ = Self.release.wait(timeout: .now() + 55)
        baseOperationEnded()
    }

    override func abandonBaseOperation(_ reason: AbandonReason) {
        Journal.record(payload.journal, "\(payload.name) abandoned \(reason)")
    }
}

/// An asynchronous retrying operation whose attempt never ends, even when cancelled.
final class StuckUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.stuck-upload"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "\(payload.name)#\(numberOfAttempts) retry=\(isRetry) retries=\(numberOfRetries ?? -1)")
    }

    override func abandonBaseOperation(_ reason: AbandonReason) {
        Journal.record(payload.journal, "\(payload.name) abandoned \(reason)")
    }
}

/// A retrying operation whose first attempt waits for a manual `retryNow()` (a retry helper
/// that is not a timer), and whose later attempts succeed.
final class ManualRetryUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest of the state belongs to RetryingOperation.
    static let persistenceIdentifier = "test.manual-retry-upload"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "\(payload.name)#\(numberOfAttempts) retry=\(isRetry)")
        baseOperationEnded(retryHelpers: isRetry ? nil : [])
    }
}

@Suite("Persistent queue: bounded runs", .timeLimit(.minutes(1)))
struct BoundedRunTests {
    /// When `run` made its report, seen from a thread of its own. Not when an awaiting task
    /// resumes: in a full test run that task may then wait seconds for one of the few threads
    /// that run every async test, and that wait is the test process's, not the run's.
    private func reportMadeAt(_ run: BoundedRun) async throws -> Date {
        try await onDedicatedThread {
            _ = run.waitUntilFinished()
            return Date()
        }
    }

    private func fixture(maxConcurrent: Int = 2, underlyingQueue: DispatchQueue? = nil) throws -> QueueFixture {
        let fixture = try QueueFixture(maxConcurrent: maxConcurrent, suspended: true, underlyingQueue: underlyingQueue)
        fixture.queue.register(StuckUpload.self)
        fixture.queue.register(BlockingSyncUpload.self)
        return fixture
    }

    private func stuck(_ fixture: QueueFixture, _ name: String) -> StuckUpload {
        StuckUpload(payload: UploadPayload(name: name, journal: fixture.journal))
    }

    @Test func aRunThatHitsItsDeadlineMidAttemptEndsTheAttemptsAsUncountedRetriesAndTheNextLaunchResumesThem() async throws {
        // Given a suspended queue (the app in the background) with two attempts that never end
        // by themselves, one of them after a counted retry
        let fixture = try fixture()
        let start = fixture.clock.now
        let a = stuck(fixture, "a")
        let b = fixture.upload("b", [.retry, .hang, .succeed], retryDelay: 5)
        try fixture.queue.addOperation(a)
        try fixture.queue.addOperation(b)

        // When a run with a 60 s deadline starts them, and the deadline passes mid-attempt
        let run = fixture.queue.startBoundedRun(until: start.addingTimeInterval(60))
        #expect(fixture.queue.isSuspended == false)
        #expect(try await eventually { fixture.lines.contains("a#1 retry=false retries=0") && fixture.lines.contains("b#1 retry=false retries=0") })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // the deadline, then b's retry
        fixture.clock.advance(by: 5)
        #expect(try await eventually { fixture.lines.contains("b#2 retry=true retries=1") })
        #expect(run.isFinished == false)
        fixture.clock.advance(by: 55)
        let report = await run.report

        // Then both attempts were stopped (their abandon hooks told), ended as uncounted retries
        // with their records rewritten, and the queue is suspended again
        #expect(report.ending == .deadlineReached)
        let ids = try [#require(fixture.queue.identifier(of: a)), #require(fixture.queue.identifier(of: b))]
        #expect(Set(report.stopped) == Set(ids))
        #expect(report.stillRunning.isEmpty)
        #expect(report.attemptsStarted == 3)
        #expect(report.succeeded.isEmpty && report.failed.isEmpty)
        #expect(report.dueOperations == 2)
        #expect(report.nextDueDate == start.addingTimeInterval(60))
        #expect(fixture.queue.isSuspended)
        #expect(fixture.lines.contains("a abandoned stopped"))
        let records = try fixture.pendingRecords().sorted { $0.enqueueSequence < $1.enqueueSequence }
        #expect(records.map(\.numberOfRetries) == [0, 1])       // no retry budget spent by the stop
        #expect(records.map(\.numberOfAttempts) == [1, 2])
        #expect(records.allSatisfy { $0.attemptsInFlight == 0 && $0.lastErrorDescription?.contains("stopped") == true })
        let retries = fixture.deliveredEvents().compactMap { event -> Bool? in
            if case .retryScheduled(_, let isCounted, _, _) = event { return isCounted }
            return nil
        }
        #expect(retries.filter { $0 }.count == 1 && retries.filter { !$0 }.count == 2)   // b's counted retry, then the two stops

        // And nothing starts while the queue stays suspended
        fixture.clock.advance(by: 1)
        try await Task.sleep(for: .milliseconds(100))
        #expect(fixture.lines.filter { $0.contains("#") }.count == 3)

        // When the app is killed and the next launch restores: both resume as retries, with
        // the counted retries they had
        fixture.queue.close()
        let next = try QueueFixture.open(fixture.directory, clock: fixture.clock, maxConcurrent: 2, events: fixture.events)
        next.register(StuckUpload.self)
        let restored = try next.restore()
        #expect(restored.restored.count == 2)
        #expect(try await eventually { fixture.lines.contains("a#2 retry=true retries=0") && fixture.lines.contains("b#3 retry=true retries=1") })
        next.close()   // (the stuck one never ends)
    }

    @Test func aRunStoppedFromAnotherThreadReportsPromptlyEvenWhenTheAttemptNeverEnds() async throws {
        let fixture = try fixture(maxConcurrent: 1)
        let attempt = stuck(fixture, "stuck")
        try fixture.queue.addOperation(attempt)
        // A grace period far longer than the bound below: the stop must not wait for it
        let run = fixture.queue.startBoundedRun(until: .distantFuture, stopGracePeriod: 30)
        #expect(try await eventually { fixture.lines.contains("stuck#1 retry=false retries=0") })

        let stoppedAt = Date()
        Thread.detachNewThread { run.stop() }
        let madeAt = try await reportMadeAt(run)
        let report = await run.report
        // Far below the 30 s grace period, generous for a loaded machine: the stop itself
        // rewrites one record.
        #expect(madeAt.timeIntervalSince(stoppedAt) < 15)
        #expect(report.ending == .stopped)
        #expect(try report.stopped == [#require(fixture.queue.identifier(of: attempt))])
        #expect(fixture.lines.contains("stuck abandoned stopped"))
        #expect(try fixture.pendingRecords().first?.numberOfRetries == 0)
        #expect(attempt.isFinished == false)   // waiting for its uncounted retry
        run.stop()   // a second stop does nothing
        #expect(run.isFinished)
    }

    @Test func aSynchronousAttemptThatDoesNotReturnIsReportedStillRunningAfterTheGracePeriod() async throws {
        // The attempt holds its thread until the end of the test: a thread of the queue's own
        // (a serial underlying queue, for one operation at a time), not one of the few threads
        // of the global queue, which on Linux also run the tests
        let fixture = try fixture(maxConcurrent: 1, underlyingQueue: DispatchQueue(label: "BoundedRunTests.blocking-attempt"))
        let blocking = BlockingSyncUpload(payload: UploadPayload(name: "sync", journal: fixture.journal))
        try fixture.queue.addOperation(blocking)
        let run = fixture.queue.startBoundedRun(until: .distantFuture, stopGracePeriod: 0.2)
        #expect(try await eventually { fixture.lines.contains("sync#1 retry=false") })

        let stoppedAt = Date()
        run.stop()
        let madeAt = try await reportMadeAt(run)
        let report = await run.report
        #expect(madeAt.timeIntervalSince(stoppedAt) < 15)   // bounded by the 0.2 s grace, not by the attempt's 55 s
        let id = try #require(fixture.queue.identifier(of: blocking))
        #expect(report.stillRunning == [id])
        #expect(report.stopped.isEmpty)
        #expect(report.nextDueDate == report.endedAt)   // its record stays pending: ask for a run at once
        #expect(fixture.lines.contains("sync abandoned stopped"))
        // Its record stays pending, its attempt marked in flight (it runs again after a crash)
        #expect(try fixture.pendingRecords().count == 1)

        // When it returns with success, that success stands: the record is removed
        BlockingSyncUpload.release.signal()
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(blocking.outcome?.isSuccess == true)
    }

    @Test func aRunThatDrainsEndsEarlyWithoutStoppingAnything() async throws {
        let fixture = try fixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("one"))
        try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: 5))
        try fixture.queue.addOperation(fixture.note("note"))
        // Not due before the deadline: does not keep the run going
        try fixture.queue.addOperation(fixture.upload("tomorrow"), options: EnqueueOptions(notBefore: start.addingTimeInterval(86_400)))

        let run = fixture.queue.startBoundedRun(until: start.addingTimeInterval(60))
        // The retry falls before the deadline: the run waits for it
        #expect(try await eventually { fixture.lines.contains("flaky#1 retry=false retries=0") && fixture.lines.contains("note ran") })
        await fixture.clock.waitForTotalScheduledRetries(count: 3)   // tomorrow, the deadline, the retry
        try await Task.sleep(for: .milliseconds(50))
        #expect(run.isFinished == false)
        fixture.clock.advance(by: 5)
        let report = await run.report

        #expect(report.ending == .drained)
        #expect(report.succeeded.count == 3)
        #expect(report.attemptsStarted == 4)   // flaky twice; the plain operation's start is counted too
        #expect(report.retriesScheduled.count == 1)
        #expect(report.stopped.isEmpty && report.stillRunning.isEmpty)
        #expect(report.dueOperations == 0)
        #expect(report.nextDueDate == start.addingTimeInterval(86_400))
        #expect(report.endedAt == start.addingTimeInterval(5))
        #expect(fixture.queue.isSuspended)
    }

    @Test func theReportReachesTheAwaitingTaskWhileEveryThreadOfTheGlobalQueueIsHeld() async throws {
        // Given a queue with nothing to run, and every thread of the global queue held by
        // blocking work elsewhere in the process
        let fixture = try fixture()
        let queue = fixture.queue
        let (report, queueWasHeld) = await whileTheGlobalQueueIsHeld { () -> BoundedRunReport? in
            // When a run drains at once and a task awaits its report
            let run = queue.startBoundedRun(until: .distantFuture)
            let arrived = Locked<BoundedRunReport?>(nil)
            let reported = DispatchSemaphore(value: 0)
            Task(priority: .high) {
                let report = await run.report
                arrived.withLock { $0 = report }
                reported.signal()
            }
            _ = reported.wait(timeout: .now() + 5)
            return arrived.withLock { $0 }
        }
        // Then the report reached the task all the same: it needs no thread of that queue
        #expect(queueWasHeld)
        #expect(report?.ending == .drained)
    }

    @Test func aRunOverAnEmptyQueueDrainsAtOnce() async throws {
        let fixture = try fixture()
        let report = await fixture.queue.run(until: .distantFuture)
        #expect(report.ending == .drained)
        #expect(report.blockedOperations == 0)
        #expect(report.nextDueDate == nil)
    }

    @Test func aRunWhoseDueWorkWaitsForARunConditionEndsBlockedNotDrained() async throws {
        // Given messages waiting for the network, which is down
        let fixture = try fixture()
        let network = ManualRunCondition(isSatisfied: false)
        fixture.queue.register(network, as: "network")
        for index in 1...3 {
            try fixture.queue.addOperation(fixture.upload("message\(index)"), options: EnqueueOptions(conditions: ["network"]))
        }

        // When a run starts: it ends at once (work waiting for a condition does not keep it
        // going), but not as drained: the work is due and could not run
        let report = await fixture.queue.run(until: .distantFuture)
        #expect(report.ending == .blocked)
        #expect(report.blockedOperations == 3)
        #expect(report.attemptsStarted == 0)
        #expect(report.dueOperations == 0)
        #expect(report.nextDueDate == fixture.clock.now)   // a condition may hold at any moment
        #expect(fixture.lines.isEmpty)
        #expect(fixture.queue.isSuspended)

        // When the network is back (the queue hears of it on its own queue), the next run
        // sends them and drains
        network.isSatisfied = true
        #expect(try await eventually { fixture.queue.operations().allSatisfy { $0.state != .waitingForConditions } })
        let next = await fixture.queue.run(until: .distantFuture)
        #expect(next.ending == .drained)
        #expect(next.succeeded.count == 3)
        #expect(next.blockedOperations == 0)
        #expect(next.nextDueDate == nil)
    }

    @Test(arguments: [(notBefore: 10.0, retryDelay: 20.0), (notBefore: 20.0, retryDelay: 10.0)])
    func aRunEndsBlockedWhenTheWorkItWaitedForComesDueAndFindsItsConditionUnmet(notBefore: TimeInterval, retryDelay: TimeInterval) async throws {
        // Given a message with a not-before date and a retry, both needing the network
        let fixture = try fixture()
        let start = fixture.clock.now
        let network = ManualRunCondition(isSatisfied: true)
        fixture.queue.register(network, as: "network")
        try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: start.addingTimeInterval(notBefore), conditions: ["network"]))
        try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: retryDelay), options: EnqueueOptions(conditions: ["network"]))

        // When a run starts, the first attempt fails, and the network goes down
        let run = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(try await eventually { fixture.queue.operations().contains { $0.state == .waitingToRetry } })
        network.isSatisfied = false
        #expect(try await eventually { fixture.queue.state.withLock { $0.conditionStates["network"] == false } })

        // Then the run waits for both (within its idle limit), and ends blocked once both have
        // come due and found the network down (the clock moves once the retry's timer is set:
        // the state says waiting to retry from the moment the record is saved)
        let retryDue = start.addingTimeInterval(retryDelay)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(retryDue) })
        fixture.clock.advance(by: 10)
        #expect(try await eventually { fixture.queue.operations().contains { $0.state == .waitingForConditions } })
        try await Task.sleep(for: .milliseconds(50))
        #expect(run.isFinished == false)   // the other one is still to come
        fixture.clock.advance(by: 10)
        try #require(try await eventually { run.isFinished })
        let report = await run.report
        #expect(report.ending == .blocked)
        #expect(report.blockedOperations == 2)
        #expect(report.nextDueDate == start.addingTimeInterval(20))   // a condition may hold at any moment
        #expect(fixture.lines == ["flaky#1 retry=false retries=0"])
    }

    @Test func aRunWhoseWorkWaitsForARetryHelperThatIsNotATimerEndsBlocked() async throws {
        let fixture = try fixture()
        fixture.queue.register(ManualRetryUpload.self)
        let upload = ManualRetryUpload(payload: UploadPayload(name: "manual", journal: fixture.journal))
        try fixture.queue.addOperation(upload)

        let report = await fixture.queue.run(until: .distantFuture)

        #expect(report.ending == .blocked)
        #expect(report.blockedOperations == 1)
        #expect(report.attemptsStarted == 1)
        #expect(report.nextDueDate == nil)   // nothing becomes due by time alone
        #expect(fixture.lines == ["manual#1 retry=false"])
        // The retry it waits for still comes when asked for
        fixture.queue.isSuspended = false
        upload.retryNow()
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["manual#1 retry=false", "manual#2 retry=true"])
    }

    @Test func aRunUntilTheDistantFutureEndsByItselfWhenNothingCanStartWithinItsIdleLimit() async throws {
        // Given an empty outbox and a 15-minute periodic series
        let fixture = try fixture()
        let start = fixture.clock.now
        let series = try fixture.queue.addOperation(fixture.upload("refresh"), options: EnqueueOptions(repeating: .every(900)))

        // When a run until the distant future starts (the clock does not move)
        let run = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(run.idleLimit == BoundedRun.defaultIdleLimit)

        // Then the first period runs, and the run ends: the next one is 15 minutes away,
        // beyond the 30 s idle limit
        try #require(try await eventually { run.isFinished })
        let report = await run.report
        #expect(report.ending == .drained)
        #expect(report.periodsEnded == [series.id])
        #expect(report.stopped.isEmpty && report.stillRunning.isEmpty)
        #expect(report.nextDueDate == start.addingTimeInterval(900))   // when to ask for the next run
        #expect(report.endedAt == start)
        #expect(fixture.queue.isSuspended)
    }

    @Test func aRunWaitsForWorkDueWithinItsIdleLimitAndNoFurther() async throws {
        // Given a retry due in 20 s, and work due tomorrow
        let fixture = try fixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: 20))
        try fixture.queue.addOperation(fixture.upload("tomorrow"), options: EnqueueOptions(notBefore: start.addingTimeInterval(86_400)))

        // When a run with the default idle limit starts: it waits for the retry (20 s < 30 s)
        let run = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(try await eventually { fixture.lines.contains("flaky#1 retry=false retries=0") })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // tomorrow, the retry
        try await Task.sleep(for: .milliseconds(50))
        #expect(run.isFinished == false)
        fixture.clock.advance(by: 20)

        // Then it ends after the retry, without waiting for tomorrow
        try #require(try await eventually { run.isFinished })
        let report = await run.report
        #expect(report.ending == .drained)
        #expect(report.succeeded.count == 1)
        #expect(report.endedAt == start.addingTimeInterval(20))
        #expect(report.nextDueDate == start.addingTimeInterval(86_400))

        // And a run whose idle limit is shorter than the wait for a retry ends at once
        try fixture.queue.addOperation(fixture.upload("later", [.retry, .succeed], retryDelay: 20))
        fixture.queue.isSuspended = false
        #expect(try await eventually { fixture.lines.contains("later#1 retry=false retries=0") && fixture.queue.nextDueDate == start.addingTimeInterval(40) })
        fixture.queue.isSuspended = true
        let shortRun = fixture.queue.startBoundedRun(until: .distantFuture, idleLimit: 10)
        try #require(try await eventually { shortRun.isFinished })
        let short = await shortRun.report
        #expect(short.ending == .drained)
        #expect(short.attemptsStarted == 0)
        #expect(short.nextDueDate == start.addingTimeInterval(40))
    }

    @Test func cancellingTheAwaitingTaskStopsTheRun() async throws {
        let fixture = try fixture(maxConcurrent: 1)
        try fixture.queue.addOperation(stuck(fixture, "stuck"))
        let task = Task { await fixture.queue.run(until: .distantFuture) }
        #expect(try await eventually { fixture.lines.contains("stuck#1 retry=false retries=0") })
        task.cancel()
        let report = await task.value
        #expect(report.ending == .stopped)
        #expect(report.stopped.count == 1)
    }

    @Test func overlappingRunsKeepTheQueueWorkingUntilTheLastEnds() async throws {
        let fixture = try fixture(maxConcurrent: 1)
        try fixture.queue.addOperation(stuck(fixture, "stuck"))
        let first = fixture.queue.startBoundedRun(until: .distantFuture)
        let second = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(try await eventually { fixture.lines.contains("stuck#1 retry=false retries=0") })

        // Ending one run leaves the attempt alone and the queue resumed
        first.stop()
        let firstReport = await first.report
        #expect(firstReport.stopped.isEmpty)
        #expect(fixture.queue.isSuspended == false)
        #expect(fixture.lines.contains("stuck abandoned stopped") == false)

        // The last one stops it
        second.stop()
        let secondReport = await second.report
        #expect(secondReport.stopped.count == 1)
        #expect(fixture.queue.isSuspended)
    }

    @Test func nothingStartsAfterTheReportEvenWhenSlotsRaceWithTheSuspension() async throws {
        // Many short attempts on 4 slots, the run stopped while they come and go
        let fixture = try fixture(maxConcurrent: 4)
        let count = isRunningUnderThreadSanitizer ? 100 : 400
        for index in 0..<count {
            try fixture.queue.addOperation(fixture.note("n\(index)"))
        }
        let run = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(try await eventually { fixture.lines.count >= 20 })
        run.stop()
        let report = await run.report
        let linesAtReport = fixture.lines.count
        try await Task.sleep(for: .milliseconds(200))
        #expect(fixture.lines.count == linesAtReport)
        #expect(report.succeeded.count <= linesAtReport)
        // Every operation that did not run is still stored, and runs once when resumed
        #expect(try fixture.pendingRecords().count == count - linesAtReport)
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(Set(fixture.lines).count == count)
        #expect(fixture.lines.count == count)
    }

    @Test func closingTheQueueEndsItsRuns() async throws {
        let fixture = try fixture()
        try fixture.queue.addOperation(stuck(fixture, "stuck"))
        let run = fixture.queue.startBoundedRun(until: .distantFuture)
        #expect(try await eventually { fixture.lines.contains("stuck#1 retry=false retries=0") })
        fixture.queue.close()
        #expect(await run.report.ending == .queueClosed)
        #expect(await fixture.queue.run(until: .distantFuture).ending == .queueClosed)
    }
}

@Suite("Persistent queue: bounded runs on a slow disk", .timeLimit(.minutes(1)))
struct BoundedRunSlowDiskTests {
    /// The system file system with every file sync made `delay` seconds slower once `slow` is set.
    static func slowSyncs(_ slow: Locked<Bool>, delay: TimeInterval) -> FileSystem {
        var fileSystem = FileSystem.system
        let synchronize = fileSystem.synchronize
        fileSystem.synchronize = { descriptor in
            if slow.withLock({ $0 }) { usleep(UInt32(delay * 1_000_000)) }
            try synchronize(descriptor)
        }
        return fileSystem
    }

    @Test func theReportWaitsUntilTheStoppedAttemptsRecordsAreSaved() async throws {
        let slow = Locked(false)
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true, fileSystem: Self.slowSyncs(slow, delay: 0.3))
        fixture.queue.register(StuckUpload.self)
        try fixture.queue.addOperation(StuckUpload(payload: UploadPayload(name: "stuck", journal: fixture.journal)))
        let run = fixture.queue.startBoundedRun(until: .distantFuture, stopGracePeriod: 10)
        #expect(try await eventually { fixture.lines.contains("stuck#1 retry=false retries=0") })

        // When the stop's record write takes 0.3 s
        slow.withLock { $0 = true }
        run.stop()
        let report = await run.report

        // Then the report came after it: the record on disk has the stop, and the retry is counted
        #expect(try fixture.pendingRecords().first?.lastErrorDescription?.contains("stopped") == true)
        #expect(report.stopped.count == 1)
        #expect(report.retriesScheduled == report.stopped)
        slow.withLock { $0 = false }
    }
}

@Suite("Persistent queue: periodic operations on a slow disk", .timeLimit(.minutes(1)))
struct PeriodicSlowDiskTests {
    @Test func aSeriesCancelledWhileItsPeriodsEndIsBeingSavedStaysCancelled() async throws {
        // Given a series whose period-end write takes 0.3 s
        let slow = Locked(false)
        let directory = try TemporaryDirectory()
        let fixture = try QueueFixture(directory: directory, fileSystem: BoundedRunSlowDiskTests.slowSyncs(slow, delay: 0.3))
        slow.withLock { $0 = true }
        let result = try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(60)))

        // When it is cancelled as soon as its first period's attempt ended (during that write)
        #expect(try await eventually { fixture.lines.count == 1 })
        try await Task.sleep(for: .milliseconds(50))
        fixture.queue.cancelOperation(withID: result.id)
        await fixture.queue.allOperationsFinished()
        slow.withLock { $0 = false }

        // Then its record is gone for good: not written back by the period's end, not restored
        let events = fixture.deliveredEvents()
        #expect(events.contains(.cancelled(result.id)))
        #expect(try fixture.pendingRecords().isEmpty)
        fixture.queue.close()
        let next = try QueueFixture.open(directory, clock: fixture.clock, events: fixture.events)
        #expect(try next.restore().restored.isEmpty)
        #expect(next.operations().isEmpty)
    }

    @Test func aWaitForTheQueueStartedDuringAPeriodEndsWhenTheSeriesIsCancelledWhileItsEndIsSaved() async throws {
        let slow = Locked(false)
        let fixture = try QueueFixture(fileSystem: BoundedRunSlowDiskTests.slowSyncs(slow, delay: 0.3))
        slow.withLock { $0 = true }
        let result = try fixture.queue.addOperation(fixture.upload("tick", [.hang]), options: EnqueueOptions(repeating: .every(60)))
        #expect(try await eventually { fixture.lines.count == 1 })
        // A wait for the queue begins while the period runs
        let waited = Locked(false)
        let waiter = Task {
            await fixture.queue.allOperationsFinished()
            waited.withLock { $0 = true }
        }
        try await Task.sleep(for: .milliseconds(50))
        // The period ends (its attempt is abandoned: a failed period), and during the slow write
        // of its end the series is cancelled
        let operation = try #require(fixture.queue.operation(withID: result.id)?.operation as? ScriptedUpload)
        Thread.detachNewThread { operation.baseOperationEnded(failingWith: UploadFailed()) }   // it saves the period's end on this thread
        try await Task.sleep(for: .milliseconds(100))
        fixture.queue.cancelOperation(withID: result.id)
        // Then the wait ends: the waiter taken when the series went idle is resumed
        #expect(try await eventually { waited.withLock { $0 } })
        waiter.cancel()
        slow.withLock { $0 = false }
        #expect(try fixture.pendingRecords().isEmpty)
    }
}
