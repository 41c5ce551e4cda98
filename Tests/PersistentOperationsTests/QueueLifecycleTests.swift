import Foundation
import Testing
@testable import PersistentOperations

@Suite("Persistent queue: lifecycle", .timeLimit(.minutes(1)))
struct QueueLifecycleTests {
    @Test func anAddedOperationIsOnDiskBeforeAddReturnsAndIsRemovedAfterSuccess() async throws {
        // Given a suspended queue
        let fixture = try QueueFixture(suspended: true)
        // When an operation is added
        let upload = fixture.upload("a")
        try fixture.queue.addOperation(upload)
        // Then its record is on disk before anything ran
        let stored = try fixture.pendingRecords()
        #expect(stored.count == 1)
        #expect(stored.first?.typeIdentifier == ScriptedUpload.persistenceIdentifier)
        #expect(fixture.lines.isEmpty)
        #expect(fixture.queue.identifier(of: upload)?.rawValue == stored.first?.id)
        // And once resumed it runs and its record is removed
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["a#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(upload.outcome?.isSuccess == true)
        let id = try #require(stored.first.map { PersistentOperationID(record: $0.id) })
        #expect(fixture.deliveredEvents() == [
            .enqueued(id, typeIdentifier: ScriptedUpload.persistenceIdentifier),
            .started(id, attempt: 1),
            .succeeded(id),
        ])
    }

    @Test func operationsRunInPriorityThenEnqueueOrder() async throws {
        // Given a suspended serial queue with operations of mixed priorities
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        let plan: [(String, Operation.QueuePriority)] = [("low", .low), ("n1", .normal), ("high", .high), ("n2", .normal), ("vh", .veryHigh)]
        for (name, priority) in plan {
            let upload = fixture.upload(name)
            upload.queuePriority = priority
            try fixture.queue.addOperation(upload)
        }
        // When it resumes
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        // Then they ran by priority, first in first out within one priority
        #expect(fixture.lines.map { String($0.prefix { $0 != "#" }) } == ["vh", "high", "n1", "n2", "low"])
    }

    @Test func aCountedRetryUpdatesTheRecordBeforeTheWaitAndTheRetryRunsWhenDue() async throws {
        // Given an operation whose first attempt asks for a counted retry in 30 s
        let fixture = try QueueFixture()
        let upload = fixture.upload("r", [.retry, .succeed], retryDelay: 30)
        try fixture.queue.addOperation(upload)
        // When the first attempt ended and the wait started
        await fixture.clock.waitForScheduledRetries(count: 1)
        // Then the record holds the retry count and the next-attempt date
        let record = try #require(try fixture.pendingRecords().first)
        #expect(record.numberOfRetries == 1)
        #expect(record.numberOfAttempts == 1)
        #expect(record.nextAttemptAt == fixture.clock.now.addingTimeInterval(30))
        #expect(fixture.queue.operations().first?.state == .waitingToRetry)
        // And after 30 s the retry runs and the record is removed
        fixture.clock.advance(by: 30)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["r#1 retry=false retries=0", "r#2 retry=true retries=1"])
        #expect(try fixture.pendingRecords().isEmpty)
        let id = PersistentOperationID(record: record.id)
        #expect(fixture.deliveredEvents().contains(
            .retryScheduled(id, isCounted: true, numberOfRetries: 1, nextAttemptAt: record.nextAttemptAt)
        ))
    }

    @Test func anUncountedRetryKeepsTheRetryCount() async throws {
        let fixture = try QueueFixture()
        try fixture.queue.addOperation(fixture.upload("u", [.retryUncounted, .retryUncounted, .succeed], retryDelay: 5))
        await fixture.clock.waitForScheduledRetries(count: 1)
        #expect(try fixture.pendingRecords().first?.numberOfRetries == 0)
        fixture.clock.advance(by: 5)
        await fixture.clock.waitForTotalScheduledRetries(count: 2)
        #expect(try fixture.pendingRecords().first?.numberOfAttempts == 2)
        fixture.clock.advance(by: 5)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["u#1 retry=false retries=0", "u#2 retry=true retries=0", "u#3 retry=true retries=0"])
    }

    @Test func aWaitingOperationHoldsNoSlotOfASerialQueue() async throws {
        // Given a serial queue whose first operation waits an hour for a retry
        let fixture = try QueueFixture(maxConcurrent: 1)
        let waiting = fixture.upload("waiting", [.retry, .succeed], retryDelay: 3600)
        try fixture.queue.addOperation(waiting)
        await fixture.clock.waitForScheduledRetries(count: 1)
        // When more operations are added
        let next = (0..<5).map { fixture.upload("next\($0)") }
        for operation in next {
            try fixture.queue.addOperation(operation)
        }
        // Then they all run while the first one waits, and nothing waits in the OperationQueue
        for operation in next {
            #expect(await operation.finalOutcome.isSuccess)
        }
        #expect(fixture.lines.count == 6)
        #expect(waiting.isWaitingToRetry)
        // Linux's OperationQueue drops a finished slot only once the slot's `start()` has
        // returned on the queue's thread, which may be a moment after the attempt finished
        // elsewhere; a slot held by the waiting operation would never go.
        let deadline = Date().addingTimeInterval(10)
        while fixture.queue.operationQueue.operationCount > 0 && Date() < deadline { await Task.yield() }
        #expect(fixture.queue.operationQueue.operationCount == 0)
        #expect(try fixture.queue.counts().waitingToRetry == 1)
        fixture.clock.advance(by: 3600)
        await fixture.queue.allOperationsFinished()
        #expect(waiting.outcome?.isSuccess == true)
    }

    @Test func aNotBeforeDateKeepsTheOperationOutOfTheOperationQueueUntilDue() async throws {
        let fixture = try QueueFixture()
        let later = fixture.clock.now.addingTimeInterval(600)
        let result = try fixture.queue.addOperation(fixture.upload("later"), options: EnqueueOptions(notBefore: later))
        try fixture.queue.addOperation(fixture.upload("now"))
        while fixture.lines.count < 1 { await Task.yield() }
        #expect(fixture.lines == ["now#1 retry=false retries=0"])
        #expect(fixture.queue.operation(withID: result.id)?.state == .scheduled)
        #expect(fixture.queue.operationQueue.operationCount <= 1)
        fixture.clock.advance(by: 599)
        #expect(fixture.queue.operation(withID: result.id)?.state == .scheduled)
        fixture.clock.advance(by: 1)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.last == "later#1 retry=false retries=0")
    }

    @Test func aNonRetriableFailureMovesTheRecordToTheFailedAreaAndItCanBeRetried() async throws {
        // Given an operation that fails for good on its first attempt
        let fixture = try QueueFixture()
        let failing = fixture.upload("f", [.fail, .succeed])
        try fixture.queue.addOperation(failing)
        await fixture.queue.allOperationsFinished()
        // Then its record sits in the failed area with the reason
        let failed = try fixture.queue.failedOperations()
        #expect(failed.count == 1)
        #expect(failed.first?.reason == "the server refused the upload")
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(try fixture.queue.counts().failed == 1)
        // When every failed operation is retried
        let requeued = try fixture.queue.retryAllFailedOperations()
        await fixture.queue.allOperationsFinished()
        // Then it runs again as a retry (a new instance, a fresh retry budget) and succeeds
        #expect(requeued == failed.map(\.id))
        #expect(fixture.lines == ["f#1 retry=false retries=0", "f#2 retry=true retries=0"])
        #expect(try fixture.queue.failedOperations().isEmpty)
        #expect(try fixture.queue.counts().failed == 0)
    }

    @Test func theRetryLimitMovesTheRecordToTheFailedArea() async throws {
        let fixture = try QueueFixture()
        let upload = fixture.upload("limit", [.retry], retryDelay: 1)
        upload.retryPolicy = RetryPolicy(retryLimit: .maximum(2), backoff: .constant(1))
        try fixture.queue.addOperation(upload)
        for total in 1...2 {
            await fixture.clock.waitForTotalScheduledRetries(count: total)
            fixture.clock.advance(by: 1)
        }
        await fixture.queue.allOperationsFinished()
        let failed = try #require(try fixture.queue.failedOperations().first)
        #expect(failed.numberOfRetries == 2)
        #expect(failed.reason.contains("retries"))
    }

    @Test func purgingDeletesFailedRecords() async throws {
        let fixture = try QueueFixture()
        try fixture.queue.addOperation(fixture.upload("a", [.fail]))
        try fixture.queue.addOperation(fixture.upload("b", [.fail]))
        await fixture.queue.allOperationsFinished()
        let failed = try fixture.queue.failedOperations()
        try fixture.queue.purgeFailedOperation(withID: failed[0].id)
        #expect(try fixture.queue.failedOperations().map(\.id) == [failed[1].id])
        #expect(try fixture.queue.purgeAllFailedOperations() == 1)
        #expect(try fixture.failedRecords().isEmpty)
    }

    @Test func aPlainOperationRunsOnceAndItsRecordIsRemoved() async throws {
        let fixture = try QueueFixture()
        let note = PlainNote(payload: UploadPayload(name: "note", journal: fixture.journal))
        try fixture.queue.addOperation(note)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["note ran"])
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(note.isFinished)
    }

    @Test func waitUntilAllOperationsAreFinishedBlocksUntilRecordsAreRemoved() async throws {
        let fixture = try QueueFixture(maxConcurrent: 2)
        for index in 0..<20 {
            try fixture.queue.addOperation(fixture.upload("w\(index)"))
        }
        let queue = fixture.queue
        await onDedicatedThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(fixture.lines.count == 20)
        #expect(try fixture.pendingRecords().isEmpty)
    }
}

/// Runs blocking work on its own thread, so the cooperative pool is never blocked.
func onDedicatedThread(_ work: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            work()
            continuation.resume()
        }
    }
}
