import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("Persistent queue: control and bad input", .timeLimit(.minutes(1)))
struct QueueControlTests {
    @Test func cancellingAScheduledOperationFinishesItAtOnceAndRemovesItsRecord() async throws {
        let fixture = try QueueFixture()
        let upload = fixture.upload("later")
        let result = try fixture.queue.addOperation(upload, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(3600)))
        #expect(fixture.queue.cancelOperation(withID: result.id))
        await fixture.queue.allOperationsFinished()
        #expect(upload.finishedCancelled)
        #expect(fixture.lines.isEmpty)
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.deliveredEvents().last == .cancelled(result.id))
        #expect(!fixture.queue.cancelOperation(withID: result.id))
    }

    @Test func cancellingAWaitingOrRunningOperationRemovesItsRecord() async throws {
        let fixture = try QueueFixture(maxConcurrent: 2)
        let waiting = fixture.upload("waiting", [.retry], retryDelay: 3600)
        let running = fixture.upload("running", [.hang])
        try fixture.queue.addOperation(waiting)
        try fixture.queue.addOperation(running)
        await fixture.clock.waitForScheduledRetries(count: 1)
        while fixture.lines.count < 2 { await Task.yield() }
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
        #expect(waiting.finishedCancelled)
        #expect(running.finishedCancelled)
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(try fixture.failedRecords().isEmpty)
    }

    @Test func cancelByTagAndByTypeCancelsExactlyThoseOperations() async throws {
        let fixture = try QueueFixture(suspended: true)
        try fixture.queue.addOperation(fixture.upload("a1"), options: EnqueueOptions(tags: ["album:1"]))
        try fixture.queue.addOperation(fixture.upload("a2"), options: EnqueueOptions(tags: ["album:1", "big"]))
        try fixture.queue.addOperation(fixture.upload("b1"), options: EnqueueOptions(tags: ["album:2"]))
        try fixture.queue.addOperation(PlainNote(payload: UploadPayload(name: "note", journal: fixture.journal)))
        #expect(fixture.queue.operations(taggedWith: "album:1").count == 2)
        #expect(fixture.queue.operations(ofType: PlainNote.self).count == 1)
        #expect(fixture.queue.cancelOperations(taggedWith: "album:1") == 2)
        #expect(fixture.queue.cancelOperations(ofType: PlainNote.self) == 1)
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["b1#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func uniqueWorkKeepsTheExistingOperationOrReplacesIt() async throws {
        let fixture = try QueueFixture(suspended: true)
        let first = try fixture.queue.addOperation(fixture.upload("first"), options: EnqueueOptions(uniqueKey: "sync"))
        // Keep: the second is not stored
        let kept = try fixture.queue.addOperation(fixture.upload("second"), options: EnqueueOptions(uniqueKey: "sync"))
        #expect(kept == EnqueueResult(id: first.id, disposition: .keptExisting))
        #expect(try fixture.pendingRecords().count == 1)
        // Replace: the third is stored and the first cancelled
        let third = try fixture.queue.addOperation(
            fixture.upload("third"), options: EnqueueOptions(uniqueKey: "sync", ifUniqueKeyExists: .replaceExisting)
        )
        #expect(third.disposition == .replaced(first.id))
        #expect(fixture.queue.operation(withUniqueKey: "sync")?.id == third.id)
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["third#1 retry=false retries=0"])
    }

    @Test func theEventStreamDeliversEveryChangeInOrder() async throws {
        let fixture = try QueueFixture()
        let stream = fixture.queue.events
        try fixture.queue.addOperation(fixture.upload("e", [.retryUncounted, .retry, .succeed], retryDelay: 1))
        var collected: [PersistentOperationEvent] = []
        for await event in stream {
            collected.append(event)
            if case .retryScheduled = event {
                await fixture.clock.waitForScheduledRetries(count: 1)
                fixture.clock.advance(by: 1)
            }
            if case .succeeded = event { break }
        }
        guard case .enqueued(let id, _)? = collected.first else {
            Issue.record("the first event is not .enqueued: \(collected)")
            return
        }
        let t0 = fixture.clock.now.addingTimeInterval(-2)
        #expect(collected == [
            .enqueued(id, typeIdentifier: ScriptedUpload.persistenceIdentifier),
            .started(id, attempt: 1),
            .retryScheduled(id, isCounted: false, numberOfRetries: 0, nextAttemptAt: t0.addingTimeInterval(1)),
            .started(id, attempt: 2),
            .retryScheduled(id, isCounted: true, numberOfRetries: 1, nextAttemptAt: t0.addingTimeInterval(2)),
            .started(id, attempt: 3),
            .succeeded(id),
        ])
    }

    @Test func addingAnUnregisteredTypeThrowsAndStoresNothing() throws {
        let directory = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(directory: directory.store)
        #expect {
            try queue.addOperation(OtherShape(payload: .init(count: 1)))
        } throws: { ($0 as? PersistenceError)?.code == .unknownType }
        #expect(try directory.names(in: "pending").isEmpty)
    }

    @Test func aPayloadThatWouldNotReadBackEqualIsRefusedAndNothingIsStored() throws {
        let fixture = try QueueFixture(suspended: true)
        try fixture.queue.addOperation(fixture.upload("kept"))
        #expect {
            try fixture.queue.addOperation(fixture.upload("$null"))
        } throws: { ($0 as? PersistenceError)?.code == .payloadDoesNotRoundTrip }
        #expect(try fixture.pendingRecords().count == 1)
        #expect(fixture.queue.operations().count == 1)
    }

    @Test(arguments: [("disk full", ENOSPC), ("read-only file system", EROFS), ("I/O error", EIO)])
    func aWriteFailureThrowsLosesNothingAndTheQueueRecovers(label: String, code: Int32) async throws {
        // Given a queue holding one record, over a file system that starts failing
        let injector = FaultInjector()
        let fixture = try QueueFixture(suspended: true, fileSystem: injector.fileSystem)
        try fixture.queue.addOperation(fixture.upload("before"))
        injector.faults.withLock { $0.write = code; $0.mutation = code }
        // When an add fails
        #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(fixture.upload("during")) }
        // Then the earlier record is intact, no partial file is left, and the failed one never runs
        #expect(try fixture.pendingRecords().count == 1)
        #expect(try !fixture.directory.names(in: "pending").contains(where: StoreLayout.isTemporaryFileName))
        // And once the fault ends the queue works again
        injector.faults.withLock { $0 = FaultInjector.Faults() }
        try fixture.queue.addOperation(fixture.upload("after"))
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(Set(fixture.lines) == ["before#1 retry=false retries=0", "after#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aDeletedStoreDirectoryGivesAClearErrorAndTheQueueRecoversWhenItIsBack() async throws {
        let fixture = try QueueFixture(suspended: true)
        try fixture.queue.addOperation(fixture.upload("kept"))
        let pending = fixture.directory.path("journal")
        let aside = fixture.directory.url.appendingPathComponent("aside").path
        #expect(rename(pending, aside) == 0)
        #expect {
            try fixture.queue.addOperation(fixture.upload("lost"))
        } throws: { ($0 as? PersistenceError)?.code == .directoryUnavailable }
        #expect(rename(aside, pending) == 0)
        try fixture.queue.addOperation(fixture.upload("after"))
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(Set(fixture.lines) == ["kept#1 retry=false retries=0", "after#1 retry=false retries=0"])
    }

    @Test func aFailureToSaveARetryIsReportedKeepsThePreviousRecordAndTheOperationGoesOn() async throws {
        // Given an operation that will ask for a retry, and a disk that fills up after the add
        let injector = FaultInjector()
        let fixture = try QueueFixture(suspended: true, fileSystem: injector.fileSystem)
        let upload = fixture.upload("r", [.retry, .succeed], retryDelay: 1)
        try fixture.queue.addOperation(upload)
        injector.faults.withLock { $0.write = ENOSPC }
        // When the retry cannot be saved
        fixture.queue.isSuspended = false
        await fixture.clock.waitForScheduledRetries(count: 1)
        // Then a store error is reported and the previous record is still on disk
        #expect(fixture.deliveredEvents().contains {
            if case .storeError(_, let message) = $0 { return message.contains("could not save the retry") }
            return false
        })
        #expect(try fixture.pendingRecords().first?.numberOfRetries == 0)
        // And the operation goes on and, once the disk has room, its record is removed
        injector.faults.withLock { $0 = FaultInjector.Faults() }
        fixture.clock.advance(by: 1)
        await fixture.queue.allOperationsFinished()
        #expect(upload.outcome?.isSuccess == true)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func countsFollowTheOperationsStates() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1)
        try fixture.queue.addOperation(fixture.upload("wait", [.retry, .succeed], retryDelay: 100))
        await fixture.clock.waitForScheduledRetries(count: 1)
        try fixture.queue.addOperation(fixture.upload("hang", [.hang]))
        try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(50)))
        try fixture.queue.addOperation(fixture.upload("queued"))
        while fixture.lines.count < 2 { await Task.yield() }
        let counts = try fixture.queue.counts()
        #expect(counts == {
            var expected = PersistentQueueCounts()
            expected.waitingToRetry = 1
            expected.running = 1
            expected.scheduled = 1
            expected.queued = 1
            return expected
        }())
        #expect(counts.pending == 4)
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.queue.counts().pending == 0)
    }

    @Test func aPayloadOverTheSizeCapIsRefusedWithRecordTooLarge() throws {
        let directory = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(
            directory: directory.store, operationQueue: OperationQueue(),
            configuration: .init(maximumRecordSize: 4_096)
        )
        queue.register(ScriptedUpload.self)
        let big = ScriptedUpload(payload: UploadPayload(name: String(repeating: "x", count: 8_192), journal: ""))
        #expect { try queue.addOperation(big) } throws: { ($0 as? PersistenceError)?.code == .recordTooLarge }
        #expect(try directory.names(in: "pending").isEmpty)
    }

    @Test func suspendingStopsNewAttemptsUntilResumed() async throws {
        let fixture = try QueueFixture(maxConcurrent: 2)
        fixture.queue.isSuspended = true
        try fixture.queue.addOperation(fixture.upload("a"))
        try fixture.queue.addOperation(fixture.upload("b"))
        #expect(try fixture.queue.counts().queued == 2)
        #expect(fixture.lines.isEmpty)
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.count == 2)
    }

    @Test func retryingOrPurgingAMissingFailedRecordThrowsRecordNotFound() throws {
        let fixture = try QueueFixture()
        let missing = try #require(PersistentOperationID(UUID().uuidString))
        #expect { try fixture.queue.retryFailedOperation(withID: missing) } throws: { ($0 as? PersistenceError)?.code == .recordNotFound }
        #expect { try fixture.queue.purgeFailedOperation(withID: missing) } throws: { ($0 as? PersistenceError)?.code == .recordNotFound }
        #expect(PersistentOperationID("not-a-uuid") == nil)
    }
}
