import Foundation
import CrashHarness
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: periodic operations", .timeLimit(.minutes(1)))
struct PeriodicOperationTests {
    /// The number of `periodEnded` events delivered so far.
    private func periodsEnded(_ fixture: QueueFixture) -> Int {
        fixture.deliveredEvents().filter { if case .periodEnded = $0 { return true } else { return false } }.count
    }

    /// A launch that added a series of `schedule`, ran its first period and closed its queue;
    /// returns it (its store, clock, events and journal are the next launch's) and when it began.
    private func firstLaunchRunningOnePeriod(of schedule: RepeatSchedule) async throws -> (QueueFixture, Date) {
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: schedule))
        // Closed once the period's end is saved and its attempt marker removed (the
        // `periodEnded` event comes after both; the count of periods changes before). A launch
        // that ends in between: `aSeriesWhoseLaunchEndedBeforeItsAttemptMarkerWentIsRestoredBetweenPeriods`.
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        fixture.queue.close()
        return (fixture, start)
    }

    private func theRecord(_ fixture: QueueFixture) throws -> OperationRecord {
        let records = try fixture.pendingRecords()
        try #require(records.count == 1)
        return records[0]
    }

    @Test func aSuccessfulPeriodKeepsTheRecordAndSchedulesTheNextFromItsTargetNotFromItsEnd() async throws {
        // Given an operation repeating every 60 s, added now
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let result = try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(60)))

        // When its first period runs and succeeds
        #expect(try await eventually { periodsEnded(fixture) == 1 })

        // Then the record stays, rescheduled for start + 60, its counts reset
        var record = try theRecord(fixture)
        #expect(record.id == result.id.rawValue)
        #expect(record.periodTarget == start.addingTimeInterval(60))
        #expect(record.notBefore == start.addingTimeInterval(60))
        #expect(record.completedPeriods == 1)
        #expect(record.numberOfAttempts == 0 && record.numberOfRetries == 0 && record.attemptsInFlight == 0)
        #expect(record.requiredFormatVersion == 4)
        #expect(fixture.deliveredEvents().contains(.periodEnded(result.id, failure: nil, nextPeriodAt: start.addingTimeInterval(60))))
        #expect(!fixture.deliveredEvents().contains(.succeeded(result.id)))
        // Between periods the queue counts as finished; the series is still listed
        await fixture.queue.allOperationsFinished()
        #expect(fixture.queue.operation(withID: result.id)?.completedPeriods == 1)
        #expect(fixture.queue.operation(withID: result.id)?.state == .scheduled)
        #expect(fixture.queue.nextDueDate == start.addingTimeInterval(60))

        // When the clock reaches the target 5 s late, the next period runs as a fresh first attempt,
        // and the one after is still start + 120 (no drift)
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 65)
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        #expect(fixture.lines == ["tick#1 retry=false retries=0", "tick#1 retry=false retries=0"])
        record = try theRecord(fixture)
        #expect(record.periodTarget == start.addingTimeInterval(120))
        #expect(record.completedPeriods == 2)
    }

    @Test func oneThousandPeriodsDoNotDrift() async throws {
        // Each period runs late by a varying amount (up to half the interval), on a test clock
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let interval: TimeInterval = 3600
        let periods = isRunningUnderThreadSanitizer ? 200 : 1_000
        try fixture.queue.addOperation(fixture.note("tick"), options: EnqueueOptions(repeating: .every(interval)))
        var random = SeededGenerator(seed: 16)
        for period in 1...periods {
            let ended = try await eventually(seconds: 30) { fixture.queue.state.withLock { $0.entries.first?.value.record.completedPeriods } == period }
            if !ended {
                let entry = fixture.queue.state.withLock { $0.entries.first?.value }
                Issue.record("period \(period) did not end: phase \(String(describing: entry?.phase)), started \(entry?.hasStarted ?? false), built \(entry?.operation != nil), clock timers \(fixture.clock.pendingCount), now \(fixture.clock.now)")
                break
            }
            let target = try #require(fixture.queue.operations().first?.periodTarget)
            if target != start.addingTimeInterval(Double(period) * interval) {
                Issue.record("period \(period) targets \(target), not start + \(period) intervals")
                break
            }
            // The clock moves only once the next period's timer is set (as the other tests wait
            // for theirs): a timer set while another thread moves the clock measures its delay
            // from a time already past.
            #expect(try await eventually(seconds: 30) {
                fixture.clock.pendingCount == 1 && fixture.queue.state.withLock { state in
                    if case .scheduled(let token)? = state.entries.first?.value.phase { return token != nil }
                    return false
                }
            })
            let lateness = Double(UInt32.random(in: 0...1_800, using: &random))
            fixture.clock.advance(by: target.timeIntervalSince(fixture.clock.now) + lateness)
            // The next period's timer may be set just after the count changed: it is then
            // already due, and fires at the next advance.
            let waitEnds = Date().addingTimeInterval(10)
            while fixture.queue.state.withLock({ $0.entries.first?.value.record.completedPeriods }) == period, Date() < waitEnds {
                try await Task.sleep(for: .milliseconds(1))
                fixture.clock.advance(by: 0)
            }
        }
        #expect(try await eventually { fixture.queue.operations().first?.completedPeriods == periods + 1 })
        // On disk too, once the last period's record is written
        #expect(try await eventually { try theRecord(fixture).periodTarget == start.addingTimeInterval(Double(periods + 1) * interval) })
        #expect(fixture.lines.count == periods + 1)
    }

    @Test func afterALongDowntimeTheMissedPeriodsRunOnceAndTheScheduleKeepsItsGrid() async throws {
        // Given a series every 60 s whose first period ran, in a launch that then ended
        let (first, start) = try await firstLaunchRunningOnePeriod(of: .every(60))
        let (directory, clock, events, journal) = (first.directory, first.clock, first.events, first.journal)

        // When the app comes back 10 intervals and 30 s later
        clock.advance(by: 630)
        let next = try QueueFixture.open(directory, clock: clock, events: events)
        let report = try next.restore()
        #expect(report.restored.count == 1)

        // Then the missed periods run once, and the next one is the first target after now
        #expect(try await eventually { next.operations().first?.completedPeriods == 2 })
        try await Task.sleep(for: .milliseconds(50))
        #expect(Journal.lines(journal).count == 2)
        let record = try #require(next.operations().first)
        #expect(record.periodTarget == start.addingTimeInterval(660))
        next.close()
    }

    @Test func aRestoredSeriesKeepsItsNextDateInsteadOfRunningAtLaunch() async throws {
        let (first, start) = try await firstLaunchRunningOnePeriod(of: .every(3600, flex: 600))
        let (directory, clock, events, journal) = (first.directory, first.clock, first.events, first.journal)

        // Five launches before the window opens: none runs it
        for _ in 0..<5 {
            clock.advance(by: 60)
            let launch = try QueueFixture.open(directory, clock: clock, events: events)
            try launch.restore()
            #expect(launch.nextDueDate == start.addingTimeInterval(3000))   // the window opens 600 s early
            await launch.allOperationsFinished()   // an idle series does not hold this
            try await Task.sleep(for: .milliseconds(20))
            launch.close()
        }
        #expect(Journal.lines(journal).count == 1)

        // Once the window opens, it runs; the next target is still start + 7200
        let last = try QueueFixture.open(directory, clock: clock, events: events)
        try last.restore()
        clock.advance(by: 3000 - 300)
        #expect(try await eventually { last.operations().first?.completedPeriods == 2 })
        #expect(Journal.lines(journal).count == 2)
        #expect(last.operations().first?.periodTarget == start.addingTimeInterval(7200))
        #expect(last.operations().first?.notBefore == start.addingTimeInterval(6600))
        last.close()
    }

    @Test func aSeriesWhoseLaunchEndedBeforeItsAttemptMarkerWentIsRestoredBetweenPeriods() async throws {
        // Given a launch closed while the end of the first period was being saved: the close
        // waits for that write, and the attempt's marker, removed just after it, stays
        let gate = PendingWriteGate()
        let fixture = try QueueFixture(suspended: true, fileSystem: gate.fileSystem)
        let (queue, clock, start) = (fixture.queue, fixture.clock, fixture.clock.now)
        let added = try queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(3600, flex: 600)))
        gate.arm()
        queue.isSuspended = false
        #expect(try await eventually { gate.isHolding })
        let closing = Task { await onDedicatedThread { queue.close() } }
        #expect(try await eventually { queue.store.state.withLock { $0.isClosed } })
        gate.release()
        await closing.value
        #expect(try theRecord(fixture).completedPeriods == 1)
        let left = try RecordStore(directory: fixture.directory.store, access: .readOnly).attemptMarkers()
        #expect(left[added.id.rawValue] != nil)

        // When the app comes back before the next period's window opens
        clock.advance(by: 60)
        let next = try QueueFixture.open(fixture.directory, clock: clock, events: fixture.events)
        let report = try next.restore()

        // Then the series is between periods, as the record says: nothing runs alone, and
        // waiting for the queue does not wait for the next period
        #expect(report.runAlone.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: fixture.directory.path("attempts", added.id.rawValue + ".suspect")))
        #expect(next.nextDueDate == start.addingTimeInterval(3000))
        #expect(await finishes(within: 10) { await next.allOperationsFinished() })

        // And the next period starts as a first attempt once its window opens
        clock.advance(by: 3000 - 60)
        #expect(try await eventually { next.operations().first?.completedPeriods == 2 })
        #expect(fixture.lines == ["tick#1 retry=false retries=0", "tick#1 retry=false retries=0"])
        next.close()
    }

    @Test func aFailedAttemptIsRetriedWithinThePeriodAndAPeriodThatFailsForGoodDoesNotEndTheSeries() async throws {
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        // Every instance: a counted retry after 10 s, then a non-retriable failure
        let result = try fixture.queue.addOperation(fixture.upload("tick", [.retry, .fail], retryDelay: 10), options: EnqueueOptions(repeating: .every(60)))
        #expect(try await eventually { fixture.lines.count == 1 })
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 10)
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        #expect(fixture.lines == ["tick#1 retry=false retries=0", "tick#2 retry=true retries=1"])

        // The period failed: reported, kept pending with its error, nothing in the failed area
        let events = fixture.deliveredEvents()
        #expect(events.contains(.periodEnded(result.id, failure: "the server refused the upload", nextPeriodAt: start.addingTimeInterval(60))))
        #expect(!events.contains { if case .failed = $0 { return true } else { return false } })
        #expect(try fixture.failedRecords().isEmpty)
        let record = try theRecord(fixture)
        #expect(record.lastErrorDescription == "the server refused the upload")
        #expect(record.numberOfRetries == 0)
        #expect(fixture.queue.operation(withID: result.id)?.lastErrorDescription == "the server refused the upload")
    }

    @Test func retriesThatOutlastThePeriodSkipTheTargetsTheyCoveredAndRunOnce() async throws {
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        // The retry waits 130 s: past two targets (60, 120)
        try fixture.queue.addOperation(fixture.upload("tick", [.retry, .succeed], retryDelay: 130), options: EnqueueOptions(repeating: .every(60)))
        #expect(try await eventually { fixture.lines.count == 1 })
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 130)
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        let record = try theRecord(fixture)
        #expect(record.periodTarget == start.addingTimeInterval(180))
        #expect(record.completedPeriods == 1)
        #expect(fixture.lines.count == 2)
    }

    @Test func theFlexWindowLetsAPeriodStartEarlyAndTheNextTargetIgnoresIt() async throws {
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(100, flex: 20)))
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        #expect(fixture.queue.nextDueDate == start.addingTimeInterval(80))
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 79)
        try await Task.sleep(for: .milliseconds(30))
        #expect(fixture.lines.count == 1)
        fixture.clock.advance(by: 1)
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        let record = try theRecord(fixture)
        #expect(record.periodTarget == start.addingTimeInterval(200))
        #expect(record.notBefore == start.addingTimeInterval(180))
    }

    @Test func aCatchUpRunInsideTheNextWindowServesThatPeriodToo() async throws {
        // 3600 s with a 600 s window: back after 1 h 55 min, the catch-up run falls in the
        // window of the 2 h target, so it serves that one; the next is 3 h, not a run at once
        let start = Date(timeIntervalSinceReferenceDate: 0)
        #expect(PersistentOperationQueue.nextPeriodTarget(after: start, interval: 3600, flex: 600, now: start.addingTimeInterval(6900))
                == start.addingTimeInterval(10_800))
        // Outside any window, the next target is the first after now
        #expect(PersistentOperationQueue.nextPeriodTarget(after: start, interval: 3600, flex: 600, now: start.addingTimeInterval(5000))
                == start.addingTimeInterval(7200))
        // On time (ended early in its own window), the next period is one interval on
        #expect(PersistentOperationQueue.nextPeriodTarget(after: start, interval: 3600, flex: 600, now: start.addingTimeInterval(-590))
                == start.addingTimeInterval(3600))
        #expect(PersistentOperationQueue.nextPeriodTarget(after: start, interval: 60, now: start.addingTimeInterval(60))
                == start.addingTimeInterval(120))

        // In a queue: the first period ran, then the app was away until inside the 2 h window
        let fixture = try QueueFixture()
        let now = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(3600, flex: 600)))
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        // (the next period's timer, at its window's start, is armed before the clock moves)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(now.addingTimeInterval(3000)) })
        fixture.clock.advance(by: 6900)
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        try await Task.sleep(for: .milliseconds(50))
        #expect(fixture.lines.count == 2)
        #expect(try theRecord(fixture).periodTarget == now.addingTimeInterval(10_800))
    }

    @Test func theFirstPeriodStartsAtItsNotBeforeDate() async throws {
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(notBefore: start.addingTimeInterval(30), repeating: .every(60, flex: 10)))
        #expect(fixture.queue.nextDueDate == start.addingTimeInterval(30))   // no flex for the first period
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 30)
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        #expect(try theRecord(fixture).periodTarget == start.addingTimeInterval(90))
    }

    @Test func cancellingEndsTheSeriesBetweenPeriodsOrDuringOne() async throws {
        let fixture = try QueueFixture()
        let between = try fixture.queue.addOperation(fixture.upload("between"), options: EnqueueOptions(repeating: .every(60)))
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        fixture.queue.cancelOperation(withID: between.id)
        #expect(try await eventually { try fixture.pendingRecords().isEmpty })
        #expect(fixture.deliveredEvents().contains(.cancelled(between.id)))
        #expect(fixture.queue.operations().isEmpty)

        let during = try fixture.queue.addOperation(fixture.upload("during", [.hang]), options: EnqueueOptions(repeating: .every(60)))
        #expect(try await eventually { fixture.lines.contains("during#1 retry=false retries=0") })
        fixture.queue.cancelOperation(withID: during.id)
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.deliveredEvents().contains(.cancelled(during.id)))
        fixture.clock.advance(by: 600)
        try await Task.sleep(for: .milliseconds(30))
        #expect(fixture.lines.count == 2)
    }

    @Test func aUniqueKeyNamesOneSeries() async throws {
        let fixture = try QueueFixture()
        let options = EnqueueOptions(uniqueKey: "refresh", repeating: .every(60))
        let first = try fixture.queue.addOperation(fixture.upload("first"), options: options)
        #expect(try await eventually { periodsEnded(fixture) == 1 })

        // Between periods the series still holds its key
        let again = try fixture.queue.addOperation(fixture.upload("again"), options: options)
        #expect(again == EnqueueResult(id: first.id, disposition: .keptExisting))

        // Replacing it ends the old series and starts the new one
        var replacing = options
        replacing.ifUniqueKeyExists = .replaceExisting
        let second = try fixture.queue.addOperation(fixture.upload("second"), options: replacing)
        #expect(second.disposition == .replaced(first.id))
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        let record = try theRecord(fixture)
        #expect(record.id == second.id.rawValue)
        #expect(fixture.deliveredEvents().contains(.cancelled(first.id)))
    }

    @Test func aPlainOperationRepeatsToo() async throws {
        let fixture = try QueueFixture()
        try fixture.queue.addOperation(fixture.note("note"), options: EnqueueOptions(repeating: .every(10)))
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 10)
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        #expect(fixture.lines == ["note ran", "note ran"])
    }

    @Test func theSeriesEndsAtItsExpirationDate() async throws {
        // Given a series every 60 s that expires at 100 s: between its second period (60 s)
        // and its third (120 s), so that no period is due at the moment it expires (a clock
        // moved past both at once would leave their order to the threads)
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let result = try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(expirationDate: start.addingTimeInterval(100), repeating: .every(60)))
        #expect(try await eventually { periodsEnded(fixture) == 1 })
        await fixture.clock.waitForTotalScheduledRetries(count: 2)   // the expiry, the next period
        fixture.clock.advance(by: 60)
        #expect(try await eventually { periodsEnded(fixture) == 2 })
        await fixture.clock.waitForTotalScheduledRetries(count: 3)   // the third period
        // When it expires, and the third period's date passes
        fixture.clock.advance(by: 40)
        await fixture.queue.allOperationsFinished()
        fixture.clock.advance(by: 30)
        // Then it ended in the failed area after two periods
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(try fixture.failedRecords().map(\.id) == [result.id.rawValue])
        #expect(fixture.lines.count == 2)
    }

    @Test func badSchedulesAndGraphsAreRejectedAndStoreNothing() throws {
        let fixture = try QueueFixture(suspended: true)
        for bad in [RepeatSchedule.every(0), .every(-5), .every(.infinity), .every(.nan), .every(60, flex: 61), .every(60, flex: -1)] {
            #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(fixture.upload("bad"), options: EnqueueOptions(repeating: bad)) }
            do {
                try fixture.queue.addOperation(fixture.upload("bad"), options: EnqueueOptions(repeating: bad))
            } catch let error as PersistenceError {
                #expect(error.code == .invalidOptions)
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        // A periodic operation cannot wait for prerequisites, nor be one
        let prerequisite = fixture.upload("prerequisite")
        try fixture.queue.addOperation(prerequisite)
        let periodicDependent = fixture.upload("periodic dependent")
        periodicDependent.addDependency(prerequisite)
        #expect { try fixture.queue.addOperation(periodicDependent, options: EnqueueOptions(repeating: .every(60))) } throws: {
            ($0 as? PersistenceError)?.code == .invalidDependency
        }
        let series = fixture.upload("series")
        try fixture.queue.addOperation(series, options: EnqueueOptions(repeating: .every(60)))
        let dependent = fixture.upload("dependent")
        dependent.addDependency(series)
        #expect { try fixture.queue.addOperation(dependent) } throws: {
            ($0 as? PersistenceError)?.code == .invalidDependency && "\($0)".contains("periodic")
        }
        #expect { try fixture.queue.addOperations([fixture.upload("x"), fixture.upload("y")], options: EnqueueOptions(repeating: .every(60))) } throws: {
            ($0 as? PersistenceError)?.code == .invalidOptions
        }
        // Only the two valid operations were stored
        #expect(try fixture.pendingRecords().count == 2)
    }

    @Test func aBoundedRunRunsThePeriodsThatFallBeforeItsDeadlineThenDrains() async throws {
        let fixture = try QueueFixture(suspended: true)
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("tick"), options: EnqueueOptions(repeating: .every(10)))
        let run = fixture.queue.startBoundedRun(until: start.addingTimeInterval(35))
        for period in 1...3 {
            #expect(try await eventually { periodsEnded(fixture) == period })
            fixture.clock.advance(by: 10)
        }
        let report = await run.report
        #expect(report.ending == .drained)   // the next window, at 40 s, is after the deadline
        #expect(report.periodsEnded.count == 4)
        #expect(report.nextDueDate == start.addingTimeInterval(40))
        #expect(fixture.lines.count == 4)
    }
}

/// Holds the first rename into the pending area after ``arm()`` — the next record write's —
/// until ``release()``.
private final class PendingWriteGate: Sendable {
    private struct State: Sendable {
        var isArmed = false
        var isHolding = false
    }

    private let state = Locked(State())
    private let released = DispatchSemaphore(value: 0)

    var fileSystem: FileSystem {
        var fileSystem = FileSystem.system
        // The next put frame (a record saved) written to the journal is held.
        fileSystem.writeAt = { [self] descriptor, bytes, offset in
            let isPut = bytes.count > JournalFrame.headerSize && Array(bytes.prefix(4)) == JournalFrame.marker
                && bytes[8] == JournalFrame.Kind.put.rawValue
            let holds = state.withLock { state -> Bool in
                guard state.isArmed, isPut else { return false }
                state.isArmed = false
                state.isHolding = true
                return true
            }
            if holds { released.wait() }
            return try FileSystem.system.writeAt(descriptor, bytes, offset)
        }
        return fileSystem
    }

    func arm() {
        state.withLock { $0.isArmed = true }
    }

    /// Whether a write is being held.
    var isHolding: Bool {
        state.withLock { $0.isHolding }
    }

    func release() {
        released.signal()
    }
}

