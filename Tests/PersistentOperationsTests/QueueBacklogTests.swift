import Foundation
import Testing
@testable import PersistentOperations

/// A plain operation that journals when it is built (`built NAME`) and when it runs
/// (`NAME ran`), to show when a restored operation is built.
final class BuildCountingNote: Operation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.build-counting-note"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
        Journal.record(payload.journal, "built \(payload.name)")
    }

    override func main() {
        guard !isCancelled else { return }
        Journal.record(payload.journal, "\(payload.name) ran")
    }
}

/// Large backlogs: a restore holds records rather than operations (each is built when its
/// first attempt starts), and due work beyond a window of slots waits outside the
/// `OperationQueue`, in run order.
@Suite("Persistent queue: backlog", .timeLimit(.minutes(1)))
struct QueueBacklogTests {
    /// A store holding the named notes (added by a first launch that then closed), reopened
    /// by a suspended queue that restores them.
    func restoredNotes(_ names: [String]) throws -> (fixture: QueueFixture, report: RestoreReport) {
        let first = try QueueFixture(suspended: true)
        first.queue.register(BuildCountingNote.self)
        for name in names {
            try first.queue.addOperation(BuildCountingNote(payload: UploadPayload(name: name, journal: first.journal)))
        }
        first.queue.close()
        let second = try QueueFixture(suspended: true, directory: first.directory, journal: first.journal)
        second.queue.register(BuildCountingNote.self)
        return (second, try second.queue.restore())
    }

    @Test func aRestoredOperationIsBuiltOnlyWhenItsFirstAttemptStartsAndACancelledOneNever() async throws {
        // Given three notes restored by a suspended queue
        let (fixture, report) = try restoredNotes(["a", "b", "c"])
        let builtByTheTest = ["built a", "built b", "built c"]
        // Then restoring built none of them
        #expect(report.restored.count == 3)
        #expect(fixture.lines == builtByTheTest)
        #expect(try fixture.queue.counts().queued == 3)

        // When one is cancelled before it ran, it finishes without being built
        #expect(fixture.queue.cancelOperation(withID: report.restored[0]))
        #expect(try fixture.pendingRecords().map(\.id).sorted() == report.restored[1...].map(\.rawValue).sorted())
        #expect(fixture.lines == builtByTheTest)

        // And when the queue runs, each other one is built just before it runs, once
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == builtByTheTest + ["built b", "b ran", "built c", "c ran"])
        #expect(try fixture.pendingRecords().isEmpty)
        let events = fixture.deliveredEvents()
        #expect(events.contains(.cancelled(report.restored[0])))
        #expect(events.filter { if case .succeeded = $0 { return true } else { return false } }.count == 2)
    }

    @Test func aQueryBuildsARestoredOperationOnceAndThatOperationIsTheOneThatRuns() async throws {
        // Given two restored notes, not built
        let (fixture, _) = try restoredNotes(["x", "y"])

        // When a query asks for them
        let infos = fixture.queue.operations()
        // Then they are built for it, and asking again builds nothing more
        #expect(infos.map { ($0.operation as? BuildCountingNote)?.payload.name } == ["x", "y"])
        _ = fixture.queue.operations()
        #expect(fixture.lines == ["built x", "built y", "built x", "built y"])

        // And the operations the query returned are the ones that run
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(infos.allSatisfy { $0.operation.isFinished })
        #expect(fixture.lines.suffix(2) == ["x ran", "y ran"])
    }

    @Test func anOperationThatNoLongerBuildsWhenDueIsQuarantinedAndTheOthersRun() async throws {
        // Given a scripted upload restored with its type registered, then its identifier
        // re-registered for a type whose payload it does not decode as
        let first = try QueueFixture(suspended: true)
        try first.queue.addOperation(first.upload("u"))
        first.queue.register(BuildCountingNote.self)
        try first.queue.addOperation(BuildCountingNote(payload: UploadPayload(name: "n", journal: first.journal)))
        first.queue.close()
        let second = try QueueFixture(suspended: true, directory: first.directory, journal: first.journal)
        second.queue.register(BuildCountingNote.self)
        #expect(try second.queue.restore().restored.count == 2)
        second.queue.register(OtherShape.self)

        // When the queue runs
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()

        // Then the upload is quarantined with a reason (never run), and the note ran
        #expect(second.lines.contains("n ran"))
        #expect(!second.lines.contains { $0.hasPrefix("u#") })
        #expect(try second.pendingRecords().isEmpty)
        #expect(try second.queue.counts().quarantined == 1)
        #expect(second.deliveredEvents().contains {
            if case .quarantined(_, let reason) = $0 { return reason.contains("the payload does not decode as") }
            return false
        })
    }

    @Test func aRestoredPrerequisiteWhosePayloadNoLongerDecodesTakesItsDependentToTheFailedArea() async throws {
        // Given an upload and a note that depends on it, stored by one launch
        let first = try QueueFixture(suspended: true)
        first.queue.register(BuildCountingNote.self)
        let upload = first.upload("u")
        try first.queue.addOperation(upload)
        let note = BuildCountingNote(payload: UploadPayload(name: "n", journal: first.journal))
        note.addDependency(upload)
        try first.queue.addOperation(note)
        let uploadID = try #require(first.queue.identifier(of: upload))
        let noteID = try #require(first.queue.identifier(of: note))
        first.queue.close()

        // When the next launch restores them with the upload's identifier registered for a
        // type its payload does not decode as (a restore does not decode payloads)
        let second = try QueueFixture(suspended: true, directory: first.directory, journal: first.journal)
        second.queue.register(BuildCountingNote.self)
        second.queue.register(OtherShape.self)
        let report = try second.queue.restore()
        #expect(Set(report.restored) == [uploadID, noteID])
        #expect(report.quarantined.isEmpty)
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()

        // Then the upload is quarantined when it is built, and the note, never run, fails naming it
        #expect(try second.queue.counts().quarantined == 1)
        #expect(!second.lines.contains("n ran"))
        let failed = try second.queue.failedOperations()
        #expect(failed.map(\.id) == [noteID])
        #expect(failed.first?.failedPrerequisite == uploadID)
        #expect(try second.pendingRecords().isEmpty)
        let events = second.deliveredEvents()
        #expect(events.contains(.abandoned(noteID, prerequisite: uploadID)))
        #expect(events.contains {
            if case .quarantined(_, let reason) = $0 { return reason.contains("the payload does not decode as") }
            return false
        })
    }

    @Test func aRestoredOperationThatRetriesRewritesItsRecordWithItsWholePayload() async throws {
        // Given a restored upload (its payload not kept in memory until it is built)
        let first = try QueueFixture(suspended: true)
        let upload = first.upload("p", [.retry, .succeed], retryDelay: 100)
        try first.queue.addOperation(upload)
        let original = try #require(try first.pendingRecords().first)
        first.queue.close()
        let second = try QueueFixture(directory: first.directory, journal: first.journal)
        #expect(try second.queue.restore().restored.count == 1)

        // When its first attempt asks for a retry, which rewrites the record
        await second.clock.waitForScheduledRetries(count: 1)

        // Then the rewritten record holds the same payload, and the retry count
        let rewritten = try #require(try second.pendingRecords().first)
        #expect(rewritten.payload == original.payload)
        #expect(rewritten.numberOfRetries == 1)
        second.clock.advance(by: 100)
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["p#1 retry=false retries=0", "p#2 retry=true retries=1"])
    }

    @Test func aRecordDamagedAfterTheRestoreIsQuarantinedWhenItsOperationIsBuilt() async throws {
        // Given two restored notes, not built yet
        let (fixture, report) = try restoredNotes(["good", "damaged"])
        let damaged = try #require(report.restored.last)

        // When one record's bytes in the journal are damaged before its operation is built
        try damageJournalRecord(damaged.rawValue, in: fixture.directory)
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()

        // Then it is quarantined with the reason, never run, and the other one ran
        #expect(fixture.lines.suffix(2) == ["built good", "good ran"])
        #expect(try fixture.queue.counts().quarantined == 1)
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.deliveredEvents().contains {
            if case .quarantined(_, let reason) = $0 { return reason.contains("could not be rebuilt") }
            return false
        })
    }

    @Test func cancellingTheOperationQueuesPlaceholdersDoesNotLoseOrCancelStoredOperations() async throws {
        // Given two operations queued in a suspended OperationQueue (one slot each)
        let fixture = try QueueFixture(suspended: true)
        try fixture.queue.addOperation(fixture.upload("first"))
        try fixture.queue.addOperation(fixture.upload("second"))
        #expect(fixture.queue.operationQueue.operationCount == 2)

        // When someone cancels everything in the OperationQueue, and it resumes
        fixture.queue.operationQueue.cancelAllOperations()
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()

        // Then the stored operations got new slots and ran to success
        #expect(fixture.lines == ["first#1 retry=false retries=0", "second#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.deliveredEvents().filter { if case .succeeded = $0 { return true } else { return false } }.count == 2)
    }

    @Test func dueWorkBeyondTheSlotWindowWaitsOutsideTheOperationQueueAndRunsInPriorityThenEnqueueOrder() async throws {
        // Given a suspended serial queue (a window of 64 slots) and 150 due notes of
        // alternating priority
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        let window = fixture.queue.slotWindow()
        #expect(window == PersistentOperationQueue.minimumSlotWindow)
        let count = window * 2 + 22
        var expectedHigh: [String] = []
        var expectedLow: [String] = []
        for index in 0..<count {
            let note = PlainNote(payload: UploadPayload(name: "n\(index)", journal: fixture.journal))
            note.queuePriority = index.isMultiple(of: 2) ? .high : .low
            try fixture.queue.addOperation(note)
            if index.isMultiple(of: 2) { expectedHigh.append("n\(index) ran") } else { expectedLow.append("n\(index) ran") }
        }

        // Then only a window of slots sits in the OperationQueue; every note counts as queued
        #expect(fixture.queue.operationQueue.operationCount == window)
        #expect(try fixture.queue.counts().queued == count)

        // When the queue runs, every note runs once, higher priority first, then in enqueue order
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == expectedHigh + expectedLow)
        #expect(fixture.queue.operationQueue.operationCount == 0)
    }

    @Test func aRestoredBacklogBeyondTheSlotWindowRunsInPriorityThenEnqueueOrderWhateverEachRecordHolds() async throws {
        // Given a store of due notes of alternating priority, every fifth with a tag (its entry
        // held whole), every seventh with a not-before date already past, one that depends on
        // the first, and one not due for an hour
        let first = try QueueFixture(maxConcurrent: 1, suspended: true)
        let window = first.queue.slotWindow()
        let count = window * 3 + 17
        var expectedHigh: [String] = []
        var expectedLow: [String] = []
        var firstNote: PlainNote?
        for index in 0..<count {
            let note = PlainNote(payload: UploadPayload(name: "n\(index)", journal: first.journal))
            note.queuePriority = index.isMultiple(of: 2) ? .high : .low
            let options = EnqueueOptions(
                notBefore: index.isMultiple(of: 7) ? first.clock.now.addingTimeInterval(-60) : nil,
                tags: index.isMultiple(of: 5) ? ["photos"] : []
            )
            try first.queue.addOperation(note, options: options)
            if firstNote == nil { firstNote = note }
            if index.isMultiple(of: 2) { expectedHigh.append("n\(index) ran") } else { expectedLow.append("n\(index) ran") }
        }
        let dependent = PlainNote(payload: UploadPayload(name: "dependent", journal: first.journal))
        dependent.queuePriority = .veryHigh
        dependent.addDependency(try #require(firstNote))
        try first.queue.addOperation(dependent)
        let later = PlainNote(payload: UploadPayload(name: "later", journal: first.journal))
        later.queuePriority = .veryHigh
        try first.queue.addOperation(later, options: EnqueueOptions(notBefore: first.clock.now.addingTimeInterval(3600)))
        first.queue.close()

        // When a suspended serial queue restores them
        let second = try QueueFixture(maxConcurrent: 1, suspended: true, directory: first.directory, journal: first.journal)
        let report = try second.queue.restore()
        #expect(report.restored.count == count + 2)

        // Then a window of slots sits in the OperationQueue and the rest wait their turn
        #expect(second.queue.operationQueue.operationCount == window)
        let counts = try second.queue.counts()
        #expect(counts.queued == count)
        #expect(counts.scheduled == 1)
        #expect(counts.waitingForPrerequisites == 1)

        // And when the queue runs, every due note runs once, higher priority first, then in
        // enqueue order; the dependent after its prerequisite, and the note not yet due once
        // the clock reaches its date
        second.queue.operationQueue.isSuspended = false
        let due = expectedHigh + expectedLow
        #expect(try await eventually { second.lines.count == due.count + 1 })
        let lines = second.lines
        #expect(lines.filter { $0 != "dependent ran" } == due)
        #expect(try #require(lines.firstIndex(of: "dependent ran")) > (try #require(lines.firstIndex(of: "n0 ran"))))
        second.clock.advance(by: 3600)
        await second.queue.allOperationsFinished()
        #expect(second.lines == lines + ["later ran"])
        #expect(try second.pendingRecords().isEmpty)
    }

    @Test func workAddedWhileARestoredBacklogWaitsTakesItsTurnAmongItByPriorityThenEnqueueOrder() async throws {
        // Given a restored backlog of normal-priority notes, three windows' worth, on a
        // suspended serial queue
        let first = try QueueFixture(maxConcurrent: 1, suspended: true)
        let count = first.queue.slotWindow() * 3
        for index in 0..<count {
            try first.queue.addOperation(PlainNote(payload: UploadPayload(name: "n\(index)", journal: first.journal)))
        }
        first.queue.close()
        let second = try QueueFixture(maxConcurrent: 1, suspended: true, directory: first.directory, journal: first.journal)
        #expect(try second.queue.restore().restored.count == count)

        // When a high-priority note, a low-priority one and a normal one are added after it
        var added: [PlainNote] = []
        for (name, priority) in [("high", Operation.QueuePriority.high), ("low", .low), ("normal", .normal)] {
            let note = PlainNote(payload: UploadPayload(name: name, journal: second.journal))
            note.queuePriority = priority
            try second.queue.addOperation(note)
            added.append(note)
        }
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()

        // Then the high one gets the first slot that frees, ahead of the backlog's next, and
        // the `OperationQueue` runs it next (by its priority); the normal one runs after the
        // whole backlog (enqueued later), and the low one last
        let backlog = (0..<count).map { "n\($0) ran" }
        #expect(second.lines == ["n0 ran", "high ran"] + backlog.dropFirst() + ["normal ran", "low ran"])
        #expect(second.queue.state.withLock { $0.ready.isEmpty })
    }
}
