import Foundation
import Testing
@testable import PersistentOperations

/// What `ReadOnlyPersistentStore` tells of periodic series (`StoredOperationRecord.repeating`,
/// `periodTarget`, `completedPeriods`, `dueDate`) and its `nextDueDate(now:)`.
@Suite("Read-only store: periodic series and next due date", .timeLimit(.minutes(1)))
struct ReadOnlyStorePeriodicTests {
    @Test func aSeriesAddedToASuspendedQueueShowsItsScheduleAndFirstPeriod() async throws {
        // Given, on a suspended queue (nothing runs), a series every hour (flex 10 min) from
        // now, a series whose first period is in two hours, and work added once
        let fixture = try QueueFixture(suspended: true)
        let start = fixture.clock.now
        let hourly = try fixture.queue.addOperation(
            fixture.upload("hourly"), options: EnqueueOptions(repeating: .every(3600, flex: 600))
        )
        let later = try fixture.queue.addOperation(
            fixture.upload("later"),
            options: EnqueueOptions(notBefore: start.addingTimeInterval(7200), repeating: .every(900))
        )
        let once = try fixture.queue.addOperation(fixture.upload("once"), options: EnqueueOptions(notBefore: start.addingTimeInterval(30)))

        // When the read-only view reads them
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        let hourlyRecord = try #require(try view.record(withID: hourly.id))
        let laterRecord = try #require(try view.record(withID: later.id))
        let onceRecord = try #require(try view.record(withID: once.id))

        // Then the series shows its schedule, the target of its first period (now), no period
        // ended, and it is due now
        #expect(hourlyRecord.repeating == RepeatSchedule(interval: 3600, flex: 600))
        #expect(hourlyRecord.periodTarget == start)
        #expect(hourlyRecord.completedPeriods == 0)
        #expect(hourlyRecord.notBefore == nil)
        #expect(hourlyRecord.dueDate == nil)
        #expect(hourlyRecord.formatVersion == 5)   // the journal's
        // And the one with a not-before date targets it, and is due then
        #expect(laterRecord.repeating == .every(900))
        #expect(laterRecord.periodTarget == start.addingTimeInterval(7200))
        #expect(laterRecord.dueDate == start.addingTimeInterval(7200))
        // And work added once has no schedule
        #expect(onceRecord.repeating == nil && onceRecord.periodTarget == nil && onceRecord.completedPeriods == 0)
        #expect(onceRecord.dueDate == start.addingTimeInterval(30))
        #expect(onceRecord.formatVersion == 5)
        // And the store is due now, as the live queue says
        #expect(try view.nextDueDate(now: start) == start)
        #expect(fixture.queue.nextDueDate == start)
        // And its counts, read from the journal's index, hold the two series
        let counts = try view.counts()
        #expect(counts.pending == 3 && counts.periodic == 2)
        #expect(counts.periodicByType == [onceRecord.typeIdentifier: 2])
    }

    @Test func aSeriesBetweenPeriodsShowsItsNextTargetCompletedPeriodsAndWindowStart() async throws {
        // Given a series every hour (flex 10 min) whose first period ran and succeeded
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let result = try fixture.queue.addOperation(
            fixture.upload("tick"), options: EnqueueOptions(uniqueKey: "catalogue", repeating: .every(3600, flex: 600))
        )
        let windowStart = start.addingTimeInterval(3000)
        #expect(try await eventually {
            fixture.deliveredEvents().contains(.periodEnded(result.id, failure: nil, nextPeriodAt: windowStart))
        })

        // When the read-only view reads it
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        let stored = try #require(try view.pendingRecords().records.first)

        // Then it shows the schedule, the next target, one period ended, and the window's start
        // as its not-before and due date
        #expect(stored.id == result.id)
        #expect(stored.repeating == RepeatSchedule(interval: 3600, flex: 600))
        #expect(stored.periodTarget == start.addingTimeInterval(3600))
        #expect(stored.completedPeriods == 1)
        #expect(stored.notBefore == windowStart)
        #expect(stored.nextAttemptAt == nil)
        #expect(stored.dueDate == windowStart)
        #expect(stored.numberOfAttempts == 0)
        #expect(stored.uniqueKey == "catalogue")
        // And the store's next due date is the window's start, as the live queue says; once it
        // has passed, the record is due now
        #expect(try view.nextDueDate(now: start) == windowStart)
        #expect(fixture.queue.nextDueDate == windowStart)
        #expect(try view.nextDueDate(now: windowStart) == windowStart)
        #expect(try view.nextDueDate(now: start.addingTimeInterval(3500)) == start.addingTimeInterval(3500))
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
    }

    @Test func nextDueDateIsTheEarliestNotBeforeDateOrNowWhenSomethingIsDue() async throws {
        // Given an empty store
        let fixture = try QueueFixture(suspended: true)
        let start = fixture.clock.now
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        // Then nothing is due
        #expect(try view.nextDueDate(now: start) == nil)

        // When two uploads are added with not-before dates, in 500 s and in 100 s
        try fixture.queue.addOperation(fixture.upload("latest"), options: EnqueueOptions(notBefore: start.addingTimeInterval(500)))
        try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: start.addingTimeInterval(100)))
        // Then the earliest is next, whichever was added first
        #expect(try view.nextDueDate(now: start) == start.addingTimeInterval(100))
        #expect(try view.nextDueDate(now: start.addingTimeInterval(99)) == start.addingTimeInterval(100))
        // And a moment after both is itself the next due date: everything is due
        #expect(try view.nextDueDate(now: start.addingTimeInterval(1000)) == start.addingTimeInterval(1000))

        // When an upload due now is added (the suspended queue does not start it)
        try fixture.queue.addOperation(fixture.upload("due"))
        // Then the store is due now
        #expect(try view.nextDueDate(now: start) == start)
        #expect(try view.pendingRecords().records.map(\.dueDate) == [
            start.addingTimeInterval(500), start.addingTimeInterval(100), nil,
        ])
    }

    @Test func aRetryDateCountsAndTheLaterOfTheTwoDatesMakesARecordDue() async throws {
        // Given an upload waiting 30 s to retry and another not due for 100 s
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: start.addingTimeInterval(100)))
        let flaky = try fixture.queue.addOperation(fixture.upload("flaky", [.retry, .succeed], retryDelay: 30), options: EnqueueOptions())
        #expect(try await eventually {
            try fixture.pendingRecords().first { $0.id == flaky.id.rawValue }?.nextAttemptAt == start.addingTimeInterval(30)
        })

        // When the read-only view reads the store
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        let stored = try #require(try view.record(withID: flaky.id))

        // Then the retry date is the record's due date and the store's next due date
        #expect(stored.nextAttemptAt == start.addingTimeInterval(30))
        #expect(stored.dueDate == start.addingTimeInterval(30))
        #expect(try view.nextDueDate(now: start) == start.addingTimeInterval(30))

        // When the retry runs and succeeds, the not-before date is next
        await fixture.clock.waitForTotalScheduledRetries(count: 2)
        fixture.clock.advance(by: 30)
        #expect(try await eventually { try fixture.pendingRecords().count == 1 })
        #expect(try view.nextDueDate(now: fixture.clock.now) == start.addingTimeInterval(100))

        // And a record with both dates is due at the later one; failed records never count
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let base = Date(timeIntervalSinceReferenceDate: 800_000_000)
        var both = try makeRecord(index: 1)
        both.notBefore = base.addingTimeInterval(50)
        both.nextAttemptAt = base.addingTimeInterval(40)
        var retrying = try makeRecord(index: 2)
        retrying.notBefore = base.addingTimeInterval(10)
        retrying.nextAttemptAt = base.addingTimeInterval(70)
        var failed = try makeRecord(index: 3)
        failed.notBefore = base.addingTimeInterval(5)
        try store.add(both)
        try store.add(retrying)
        try store.add(failed)
        _ = try store.moveToFailed(failed, reason: "refused")
        store.close()
        let crafted = try ReadOnlyPersistentStore(directory: directory.store)
        #expect(try crafted.pendingRecords().records.map(\.dueDate) == [base.addingTimeInterval(50), base.addingTimeInterval(70)])
        #expect(try crafted.nextDueDate(now: base) == base.addingTimeInterval(50))
        #expect(try crafted.nextDueDate(now: base.addingTimeInterval(45)) == base.addingTimeInterval(50))
        #expect(try crafted.nextDueDate(now: base.addingTimeInterval(60)) == base.addingTimeInterval(60))

        // (the failed record's earlier not-before date did not count); and with the pending
        // records gone, a store whose only record failed has no next due date
        let reopened = try RecordStore(directory: directory.store)
        try reopened.removePending(id: both.id)
        try reopened.removePending(id: retrying.id)
        reopened.close()
        #expect(try crafted.failedRecords().records.map(\.id.rawValue) == [failed.id])
        #expect(try crafted.nextDueDate(now: base) == nil)
    }

    @Test func countsAndTheNextDueDateAreTheSameFromTheJournalsIndexAndFromRecordFiles() throws {
        // Given the same records in a store of the earlier layout (one file each, read record
        // by record) and in a journal store (read from its index): a periodic one, one due in
        // 60 s, one waiting 30 s to retry, and one due now
        let now = Date(timeIntervalSinceReferenceDate: 780_000_000)
        var records = try (0..<4).map { try makeRecord(index: $0) }
        records[0].repeatInterval = 3_600
        records[0].periodTarget = now.addingTimeInterval(3_600)
        records[0].notBefore = now.addingTimeInterval(3_000)
        records[1].notBefore = now.addingTimeInterval(60)
        records[2].nextAttemptAt = now.addingTimeInterval(30)
        for engine in [RecordStore.Engine.files, .journal] {
            let directory = try TemporaryDirectory()
            let store = try RecordStore(directory: directory.store, configuration: .init(engine: engine))
            for record in records { try store.add(record) }
            store.close()
            // When each is read through a read-only view
            let before = try ReadOnlyPersistentStore(directory: directory.store)
            // Then both count one series among four pending, due now (the last one)
            let counts = try before.counts()
            #expect(counts.pending == 4 && counts.periodic == 1 && counts.periodicByType == [records[0].typeIdentifier: 1], "\(engine)")
            #expect(try before.nextDueDate(now: now) == now, "\(engine)")

            // When the one due now is removed
            let writer = try RecordStore(directory: directory.store, configuration: .init(engine: engine))
            try writer.removePending(id: records[3].id)
            writer.close()
            let after = try ReadOnlyPersistentStore(directory: directory.store)
            // Then the retry is next, and once it is past, everything is due
            #expect(try after.counts().pending == 3, "\(engine)")
            #expect(try after.nextDueDate(now: now) == now.addingTimeInterval(30), "\(engine)")
            #expect(try after.nextDueDate(now: now.addingTimeInterval(45)) == now.addingTimeInterval(45), "\(engine)")
        }
    }
}
