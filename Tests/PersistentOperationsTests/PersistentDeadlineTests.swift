import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: attempt timeouts and expiration dates", .timeLimit(.minutes(1)))
struct PersistentDeadlineTests {
    @Test func aHungAttemptTimesOutFreesItsSlotAndRetriesWithItsRecordUpdated() async throws {
        // Given a one-slot queue: an upload whose first attempt never ends (timeout 30 s, retry
        // after 5 s), then an ordinary one
        let fixture = try QueueFixture(maxConcurrent: 1)
        var payload = UploadPayload(name: "hung", journal: fixture.journal, steps: [.hang, .succeed], retryDelay: 5)
        payload.attemptTimeout = 30
        let hung = ScriptedUpload(payload: payload)
        try fixture.queue.addOperation(hung)
        try fixture.queue.addOperation(fixture.upload("next"))
        #expect(try await eventually { fixture.lines == ["hung#1 retry=false retries=0"] })

        // When the attempt runs past its timeout
        fixture.clock.advance(by: 30)

        // Then the record holds a counted retry with the timeout as its error, and the slot
        // went to the next upload
        #expect(try await eventually { fixture.lines.contains("next#1 retry=false retries=0") })
        #expect(try await eventually { try fixture.pendingRecords().count == 1 })
        let record = try #require(try fixture.pendingRecords().first)
        #expect(record.numberOfRetries == 1)
        #expect(record.lastErrorDescription?.contains("attemptTimedOut") == true)
        #expect(record.nextAttemptAt == fixture.clock.now.addingTimeInterval(5))

        // And the retry runs when due and succeeds
        fixture.clock.advance(by: 5)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.last == "hung#2 retry=true retries=1")
        #expect(hung.outcome?.isSuccess == true)
        #expect(try fixture.pendingRecords().isEmpty && fixture.failedRecords().isEmpty)
    }

    @Test func anOperationStillScheduledAtItsExpirationMovesToTheFailedAreaAsExpired() async throws {
        // Given an upload not due for 100 s that expires in 50 s
        let fixture = try QueueFixture()
        let expiry = fixture.clock.now.addingTimeInterval(50)
        let result = try fixture.queue.addOperation(
            fixture.upload("late"),
            options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(100), expirationDate: expiry)
        )
        // Its record holds the date: in the journal's format version, and a record file of the
        // earlier layout would need version 3
        let stored = try #require(try fixture.pendingRecords().first)
        #expect(stored.expiresAt == expiry)
        #expect(stored.formatVersion == 5 && stored.journalFormatVersion == 5 && stored.requiredFormatVersion == 3)
        #expect(fixture.queue.operation(withID: result.id)?.expirationDate == expiry)

        // When the date comes
        fixture.clock.advance(by: 50)
        await fixture.queue.allOperationsFinished()

        // Then it never ran, and failed as expired
        #expect(fixture.lines.isEmpty)
        let failed = try #require(try fixture.failedRecords().first)
        #expect(failed.failureReason?.contains("expired") == true)
        #expect(try fixture.queue.failedOperations().map(\.id) == [result.id])
        #expect(fixture.deliveredEvents().contains { if case .failed(result.id, let reason) = $0 { reason.contains("expired") } else { false } })
    }

    @Test func anOperationWaitingForItsPrerequisitesExpiresAndItsDependentsFailWithIt() async throws {
        // Given a running upload that hangs, a dependent that expires in 10 s, and its own dependent
        let fixture = try QueueFixture(maxConcurrent: 1)
        let blocker = fixture.upload("blocker", [.hang])
        let expiring = fixture.upload("expiring")
        let last = fixture.upload("last")
        expiring.addDependency(blocker)
        last.addDependency(expiring)
        var options = EnqueueOptions()
        options.expirationDate = fixture.clock.now.addingTimeInterval(10)
        try fixture.queue.addOperation(blocker)
        let expiringID = try fixture.queue.addOperation(expiring, options: options).id
        let lastID = try fixture.queue.addOperation(last, options: EnqueueOptions()).id
        #expect(try await eventually { fixture.lines == ["blocker#1 retry=false retries=0"] })

        // When the date comes while it waits
        fixture.clock.advance(by: 10)

        // Then it fails as expired (its live operation too), and its dependent fails naming it
        #expect(try await eventually { try fixture.failedRecords().count == 2 })
        #expect((expiring.outcome?.error as? RetryingOperationError)?.code == .expired)
        let failed = try fixture.failedRecords()
        #expect(failed.first { $0.id == expiringID.rawValue }?.failureReason?.contains("expired") == true)
        #expect(failed.first { $0.id == lastID.rawValue }?.failedPrerequisite == expiringID.rawValue)
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["blocker#1 retry=false retries=0"])
    }

    @Test func aDependentThatExpiredIsNotStartedAgainWhenItsPrerequisiteFails() async throws {
        // Given a dependent that expires while it waits for its prerequisite, which then fails
        let fixture = try QueueFixture(maxConcurrent: 1)
        let prerequisite = fixture.upload("prerequisite", [.hang])
        let dependent = fixture.upload("dependent")
        dependent.addDependency(prerequisite)
        try fixture.queue.addOperation(prerequisite)
        try fixture.queue.addOperation(dependent, options: EnqueueOptions(expirationDate: fixture.clock.now.addingTimeInterval(5)))
        #expect(try await eventually { fixture.lines == ["prerequisite#1 retry=false retries=0"] })
        fixture.clock.advance(by: 5)
        fixture.queue.cancelAllOperations()
        // Then the process survives, both end, and the dependent never ran
        await fixture.queue.allOperationsFinished()
        #expect(dependent.isFinished)
        #expect(fixture.lines == ["prerequisite#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func anOperationWaitingToRetryExpiresWithoutAnotherAttempt() async throws {
        let fixture = try QueueFixture()
        let upload = fixture.upload("flaky", [.retry, .succeed], retryDelay: 100)
        try fixture.queue.addOperation(upload, options: EnqueueOptions(expirationDate: fixture.clock.now.addingTimeInterval(10)))
        #expect(try await eventually { try fixture.pendingRecords().first?.numberOfRetries == 1 })
        // (the store shows the rewrite once its frame is written, before the wait is scheduled;
        // the clock's one timer may be the one the queue armed for the expiration at the add)
        let retryDue = fixture.clock.now.addingTimeInterval(100)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(retryDue) })
        fixture.clock.advance(by: 10)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["flaky#1 retry=false retries=0"])
        #expect((upload.outcome?.error as? RetryingOperationError)?.code == .expired)
        #expect(try fixture.failedRecords().first?.failureReason?.contains("expired") == true)
    }

    @Test func aPlainOperationQueuedBehindASuspendedQueueExpiresWithoutRunning() async throws {
        let fixture = try QueueFixture(suspended: true)
        let note = fixture.note("memo")
        try fixture.queue.addOperation(note, options: EnqueueOptions(expirationDate: fixture.clock.now.addingTimeInterval(5)))
        fixture.clock.advance(by: 5)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.isEmpty)
        #expect(note.isFinished)
        #expect(try fixture.failedRecords().first?.failureReason?.contains("expired") == true)
    }

    @Test func anOperationAddedAfterItsExpirationFailsWithoutAnAttempt() async throws {
        // Its slot starts before its expiration timer fires: the slot checks the date
        let fixture = try QueueFixture()
        let upload = fixture.upload("stale")
        let note = fixture.note("stale note")
        let expired = EnqueueOptions(expirationDate: fixture.clock.now.addingTimeInterval(-1))
        try fixture.queue.addOperation(upload, options: expired)
        try fixture.queue.addOperation(note, options: expired)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.isEmpty)
        #expect(upload.numberOfAttempts == 0)
        #expect((upload.outcome?.error as? RetryingOperationError)?.code == .expired)
        #expect(note.isFinished && note.isCancelled)   // a plain operation is finished by a cancel
        let failed = try fixture.failedRecords()
        #expect(failed.count == 2)
        #expect(failed.allSatisfy { $0.failureReason?.contains("expired") == true })
    }

    @Test func theOperationsOwnExpirationDateIsSavedToo() async throws {
        let fixture = try QueueFixture(suspended: true)
        let upload = fixture.upload("own")
        let date = fixture.clock.now.addingTimeInterval(60)
        upload.expirationDate = date
        try fixture.queue.addOperation(upload, options: EnqueueOptions(expirationDate: date.addingTimeInterval(60)))
        #expect(try fixture.pendingRecords().first?.expiresAt == date)   // the earlier one
    }

    @Test func aRestoredOperationThatExpiresWhileItWaitsMovesToTheFailedAreaWithItsPayload() async throws {
        // Given a store with two uploads not built yet after a restore: one not due for 60 s,
        // one waiting for a condition that does not hold; both expire in 10 s
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        let (notDue, gated) = try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { first in
            first.register(ManualRunCondition(isSatisfied: false), as: "network")
            let expiry = clock.now.addingTimeInterval(10)
            let notDue = try first.addOperation(ScriptedUpload(payload: UploadPayload(name: "not due", journal: journal)),
                                                options: EnqueueOptions(notBefore: clock.now.addingTimeInterval(60), expirationDate: expiry)).id
            let gated = try first.addOperation(ScriptedUpload(payload: UploadPayload(name: "gated", journal: journal)),
                                               options: EnqueueOptions(expirationDate: expiry, conditions: ["network"])).id
            return (notDue, gated)
        }
        let queue = try QueueFixture.open(directory, clock: clock, events: events)
        queue.register(ManualRunCondition(isSatisfied: false), as: "network")
        #expect(try queue.restore().restored.count == 2)
        // When the date comes while they wait
        clock.advance(by: 10)
        await queue.allOperationsFinished()
        // Then both are in the failed area, payloads included, and nothing is left pending
        let store = try ReadOnlyPersistentStore(directory: directory.store)
        #expect(try store.pendingRecords().records.isEmpty)
        let failed = try store.failedRecords().records
        #expect(Set(failed.map(\.id)) == [notDue, gated])
        #expect(failed.allSatisfy { !$0.payload.isEmpty && $0.failureReason?.contains("expired") == true })
        #expect(try queue.counts().failed == 2)
        queue.hub.flush()
        #expect(!events.withLock { $0 }.contains { if case .storeError = $0 { true } else { false } })
        #expect(Journal.lines(journal).isEmpty)
    }

    @Test func restoreFailsWhatExpiredWhileTheAppWasNotRunningAndAReQueueDropsTheDate() async throws {
        // Given a store with an upload that expires in 10 s, a dependent of it, and one that
        // does not expire, left by a launch that ended before any ran
        let directory = try TemporaryDirectory()
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let journal = UUID().uuidString
        func upload(_ name: String) -> ScriptedUpload {
            ScriptedUpload(payload: UploadPayload(name: name, journal: journal))
        }
        let ids = try QueueFixture.earlierLaunch(directory, clock: clock, events: events) { first in
            let expiring = upload("expiring")
            expiring.expirationDate = clock.now.addingTimeInterval(10)
            let dependent = upload("dependent")
            dependent.addDependency(expiring)
            return try first.addOperations([expiring, dependent, upload("keeper")])
        }

        // When the next launch restores after the date passed
        clock.advance(by: 11)
        let queue = try QueueFixture.open(directory, clock: clock, events: events)
        let report = try queue.restore()

        // Then the expired one is reported and failed, its dependent failed with it, the other runs
        #expect(report.expired == [ids[0]])
        #expect(report.failedWithTheirPrerequisites == [ids[1]])
        await queue.allOperationsFinished()
        #expect(Journal.lines(journal) == ["keeper#1 retry=false retries=0"])
        let failed = try queue.failedOperations()
        #expect(Set(failed.map(\.id)) == [ids[0], ids[1]])

        // And re-queueing it drops the date: it runs
        try queue.retryFailedOperation(withID: ids[0])
        await queue.allOperationsFinished()
        #expect(Journal.lines(journal).contains("expiring#1 retry=false retries=0"))
    }
}

@Suite("Persistent queue: expiration across a restart (child processes)", .timeLimit(.minutes(2)))
struct ExpirationAcrossRestartTests {
    @Test func recordsThatExpireWhileTheAppIsKilledFailAtTheNextRestoreAndTheOthersStayPending() async throws {
        // Given an app that stored 10 uploads expiring in 1 s and 10 that never expire (all due
        // only in an hour), then was SIGKILLed (its timers never fire: as if killed before)
        let directory = try TemporaryDirectory()
        let outputPath = directory.url.appendingPathComponent("app-output.txt").path
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        let output = try #require(FileHandle(forWritingAtPath: outputPath))
        let app = try ChildApp.launch(["add-expiring", "--store", directory.store.path, "--count", "10", "--expires-in", "1"], output: output)
        let deadline = Date().addingTimeInterval(30)
        while !(try String(contentsOfFile: outputPath, encoding: .utf8)).contains("added 20"), app.isRunning, Date() < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        let added = Date()
        #expect(try String(contentsOfFile: outputPath, encoding: .utf8).contains("added 20"))
        kill(app.processIdentifier, SIGKILL)
        await onDedicatedThread { app.waitUntilExit() }
        #expect(try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records.filter { $0.expirationDate != nil }.count == 10)

        // When the next launch restores after the date passed
        try await Task.sleep(for: .seconds(max(0, 1.2 - Date().timeIntervalSince(added))))
        let result = try await onDedicatedThread { try ChildApp.run("crash-demo", ["restore-report", "--store", directory.store.path]) }
        #expect(result.status == 0, "\(result.error)")

        // Then the 10 expiring ones were reported expired and moved to the failed area; the
        // others are still pending, untouched
        let report = try result.json()
        #expect((report["expired"] as? [String])?.count == 10)
        #expect((report["restored"] as? [String])?.count == 10)
        let store = try ReadOnlyPersistentStore(directory: directory.store)
        let failed = try store.failedRecords().records
        #expect(failed.count == 10)
        #expect(failed.allSatisfy { $0.failureReason?.contains("expired") == true && $0.expirationDate != nil })
        let pending = try store.pendingRecords().records
        #expect(pending.count == 10 && pending.allSatisfy { $0.expirationDate == nil && $0.numberOfAttempts == 0 })
    }
}
