import Foundation
import Testing
@testable import PersistentOperations

/// Requests from other processes through the store's inbox: re-drive, purge and cancel on a
/// queue that runs, without stopping it.
@Suite("Persistent queue: requests from other processes", .timeLimit(.minutes(1)))
struct InboxTests {
    /// The response to request `name`, waiting up to `timeout` seconds for it.
    static func response(_ inbox: StoreInbox, _ name: String, timeout: TimeInterval = 30) async throws -> StoreInbox.Response? {
        // (Looked at once more after the deadline: on a loaded machine this task may resume late.)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let response = inbox.response(to: name) { return response }
            try await Task.sleep(for: .milliseconds(10))
        }
        return inbox.response(to: name)
    }

    @Test func aRequestLeftBeforeRestoreIsTakenInAfterItAndTheFailedOperationRunsAgain() async throws {
        // Given a launch whose operation failed for good
        let first = try QueueFixture()
        let failed = try first.queue.addOperation(first.upload("flaky", [.fail, .succeed]), options: EnqueueOptions())
        await first.queue.allOperationsFinished()
        #expect(try first.failedRecords().map(\.id) == [failed.id.rawValue])
        first.queue.close()

        // When another process asks for it to be re-queued while the next launch has not restored
        let inbox = StoreInbox(directory: first.directory.store)
        let second = try QueueFixture(directory: first.directory, journal: first.journal)
        let name = try inbox.send(StoreInbox.Request(action: .retryFailed, ids: [failed.id.rawValue]))
        try await Task.sleep(for: .milliseconds(100))

        // Then nothing happens before the restore, and right after it the request is done and
        // answered, and the operation runs again and succeeds
        #expect(inbox.response(to: name) == nil && inbox.isWaiting(name))
        _ = try second.queue.restore()
        let response = try #require(try await Self.response(inbox, name))
        #expect(response == StoreInbox.Response(succeeded: true, message: "re-queued 1 operation", affected: [failed.id.rawValue]))
        #expect(!inbox.isWaiting(name))
        await second.queue.allOperationsFinished()
        #expect(second.lines.last == "flaky#2 retry=true retries=0")
        #expect(try second.failedRecords().isEmpty && second.pendingRecords().isEmpty)
    }

    @Test func purgeAndCancelByTagAreDoneInOrderAndWhatMovedMeanwhileIsReported() async throws {
        // Given a running queue with two failed operations and two hanging ones tagged "batch-7"
        let fixture = try QueueFixture(maxConcurrent: 4)
        _ = try fixture.queue.restore()
        let failed = try (1...2).map { try fixture.queue.addOperation(fixture.upload("refused-\($0)", [.fail]), options: EnqueueOptions()) }
        await fixture.queue.allOperationsFinished()
        let hanging = try (1...2).map {
            try fixture.queue.addOperation(fixture.upload("hanging-\($0)", [.hang]), options: EnqueueOptions(tags: ["batch-7"]))
        }

        // When another process asks to purge every failed operation, to cancel the tag, and to
        // re-queue a failed operation that the purge will have removed
        let inbox = StoreInbox(directory: fixture.directory.store)
        let purge = try inbox.send(StoreInbox.Request(action: .purgeFailed, all: true))
        let cancel = try inbox.send(StoreInbox.Request(action: .cancel, tag: "batch-7"))
        let late = try inbox.send(StoreInbox.Request(action: .retryFailed, ids: [failed[0].id.rawValue]))

        // Then each is done and answered
        let purged = try #require(try await Self.response(inbox, purge))
        #expect(purged.succeeded && Set(purged.affected) == Set(failed.map(\.id.rawValue)))
        let cancelled = try #require(try await Self.response(inbox, cancel))
        #expect(cancelled.succeeded && Set(cancelled.affected) == Set(hanging.map(\.id.rawValue)))
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.failedRecords().isEmpty && fixture.pendingRecords().isEmpty)
        // And the re-queue of a purged operation changes nothing and says why
        let lateResponse = try #require(try await Self.response(inbox, late))
        #expect(!lateResponse.succeeded && lateResponse.affected.isEmpty)
        #expect(lateResponse.message.hasPrefix("re-queued 0 operations; not done: \(failed[0].id.rawValue): "))
    }

    @Test func anUnreadableRequestIsAnsweredAsSuchAndTheNextIsStillDone() async throws {
        // Given a running queue with a failed operation
        let fixture = try QueueFixture()
        _ = try fixture.queue.restore()
        let failed = try fixture.queue.addOperation(fixture.upload("refused", [.fail]), options: EnqueueOptions())
        await fixture.queue.allOperationsFinished()

        // When another process leaves a damaged request, then a good one
        let inbox = StoreInbox(directory: fixture.directory.store)
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: inbox.path + "/0000000000000001-damaged.request"))
        let good = try inbox.send(StoreInbox.Request(action: .purgeFailed, ids: [failed.id.rawValue]))

        // Then the damaged one is answered with a failure and removed, and the good one done
        let damaged = try #require(try await Self.response(inbox, "0000000000000001-damaged"))
        #expect(!damaged.succeeded && damaged.message.contains("is not a request this library reads"))
        #expect(try #require(try await Self.response(inbox, good)).succeeded)
        #expect(inbox.pendingRequests().isEmpty)
        #expect(try fixture.failedRecords().isEmpty)
    }

    @Test func aRequestToAClosedQueueWaitsForTheNextLaunchAndAQueueThatTakesNoneLeavesIt() async throws {
        // Given a queue that restored, with a failed operation, then closed
        let first = try QueueFixture()
        _ = try first.queue.restore()
        let failed = try first.queue.addOperation(first.upload("refused", [.fail]), options: EnqueueOptions())
        await first.queue.allOperationsFinished()
        first.queue.close()

        // When a request arrives, and the next launch takes no requests
        let inbox = StoreInbox(directory: first.directory.store)
        let name = try inbox.send(StoreInbox.Request(action: .purgeFailed, all: true))
        do {
            let operationQueue = OperationQueue()
            var configuration = PersistentOperationQueue.Configuration()
            configuration.takesAdministrationRequests = false
            let queue = try PersistentOperationQueue(directory: first.directory.store, operationQueue: operationQueue, configuration: configuration)
            queue.register(ScriptedUpload.self)
            _ = try queue.restore()
            try await Task.sleep(for: .milliseconds(200))
            queue.close()
        }

        // Then it waits, untouched, and the launch after that (which takes them) does it
        #expect(inbox.isWaiting(name) && inbox.response(to: name) == nil)
        #expect(try first.failedRecords().map(\.id) == [failed.id.rawValue])
        let third = try QueueFixture(directory: first.directory, journal: first.journal)
        _ = try third.queue.restore()
        #expect(try #require(try await Self.response(inbox, name)).affected == [failed.id.rawValue])
        #expect(try third.failedRecords().isEmpty)
    }

    @Test func theInspectorAsksTheRunningQueueToRetryAndToCancel() async throws {
        // Given a running queue (this process holds the store) with a failed operation and a
        // hanging one tagged "import"
        let fixture = try QueueFixture(maxConcurrent: 2)
        _ = try fixture.queue.restore()
        let failed = try fixture.queue.addOperation(fixture.upload("flaky", [.fail, .succeed]), options: EnqueueOptions())
        await fixture.queue.allOperationsFinished()
        let hanging = try fixture.queue.addOperation(fixture.upload("hanging", [.hang]), options: EnqueueOptions(tags: ["import"]))

        // When store-inspector, another process, asks it to re-drive the dead letters and to
        // cancel the tag
        let retry = try await StoreInspectorTests.inspect("retry-failed", fixture.directory.store.path, "--all")
        let cancel = try await StoreInspectorTests.inspect("cancel", fixture.directory.store.path, "--tag", "import", "--json")

        // Then the queue did both and the inspector printed its answers
        #expect(retry.status == 0, "\(retry.error)")
        #expect(retry.output == "the running app re-queued 1 failed record; the running app runs them now\n  \(failed.id.rawValue)\n")
        #expect(cancel.status == 0, "\(cancel.error)")
        #expect(try cancel.json()["cancelled"] as? [String] == [hanging.id.rawValue])
        #expect(try cancel.json()["byRunningApp"] as? Bool == true)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.contains("flaky#2 retry=true retries=0"))
        #expect(try fixture.failedRecords().isEmpty && fixture.pendingRecords().isEmpty)
        // And the inspector collected its responses
        let inbox = StoreInbox(directory: fixture.directory.store)
        #expect(try FileManager.default.contentsOfDirectory(atPath: inbox.path).isEmpty)
        // And with no app running, cancel is refused clearly
        fixture.queue.close()
        let refused = try await StoreInspectorTests.inspect("cancel", fixture.directory.store.path, hanging.id.rawValue)
        #expect(refused.status == 1 && refused.error.contains("no running app holds the store"))
    }
}
