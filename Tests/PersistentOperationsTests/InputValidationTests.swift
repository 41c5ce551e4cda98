import Foundation
import Testing
@testable import PersistentOperations

/// Input a server builds from a request or a configuration file gets a thrown
/// `PersistenceError`, never a trap, and stores nothing.
@Suite("Persistent queue: bad input throws", .timeLimit(.minutes(1)))
struct InputValidationTests {
    @Test func aBatchWithAUniqueKeyIsRefusedAndStoresNothing() throws {
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        #expect {
            try fixture.queue.addOperations([fixture.upload("a"), fixture.upload("b")], options: EnqueueOptions(uniqueKey: "import-42"))
        } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func anOperationAddedTwiceOrTwiceInOneBatchOrAfterItFinishedIsRefused() async throws {
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        // An operation added once is stored once
        let once = fixture.upload("once")
        try fixture.queue.addOperation(once)
        #expect {
            try fixture.queue.addOperation(once)
        } throws: { ($0 as? PersistenceError)?.code == .operationAlreadyAdded }
        // A batch naming one operation twice, or one already added, stores nothing
        let twice = fixture.upload("twice")
        #expect {
            try fixture.queue.addOperations([twice, fixture.upload("other"), twice])
        } throws: { ($0 as? PersistenceError)?.code == .operationAlreadyAdded }
        #expect {
            try fixture.queue.addOperations([fixture.upload("new"), once])
        } throws: { ($0 as? PersistenceError)?.code == .operationAlreadyAdded }
        // An operation that ran elsewhere is refused
        let finished = fixture.upload("finished")
        finished.start()
        _ = await finished.finalOutcome
        #expect {
            try fixture.queue.addOperation(finished)
        } throws: { ($0 as? PersistenceError)?.code == .operationAlreadyAdded }
        #expect(try fixture.pendingRecords().count == 1)
    }

    @Test func aConfigurationTheQueueCannotUseIsRefusedAndLeavesTheStoreFree() throws {
        let directory = try TemporaryDirectory()
        for configuration in [
            PersistentOperationQueue.Configuration(crashLoopLimit: 0),
            PersistentOperationQueue.Configuration(maximumRecordSize: 10),
        ] {
            #expect {
                _ = try PersistentOperationQueue(directory: directory.url, operationQueue: OperationQueue(), configuration: configuration)
            } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
        }
        var changed = PersistentOperationQueue.Configuration()
        changed.crashLoopLimit = -1   // no trap when set either
        #expect(throws: PersistenceError.self) {
            _ = try PersistentOperationQueue(directory: directory.url, operationQueue: OperationQueue(), configuration: changed)
        }
        // The store was not locked by the refused opens
        let queue = try PersistentOperationQueue(directory: directory.url)
        queue.close()
    }

    @Test func aPageLimitBelowOneIsRefused() throws {
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        try fixture.queue.addOperation(fixture.upload("a"))
        fixture.queue.close()
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        for limit in [0, -5] {
            #expect {
                _ = try view.pendingRecords(after: nil, limit: limit)
            } throws: { ($0 as? PersistenceError)?.code == .invalidOptions }
        }
        #expect(try view.pendingRecords(after: nil, limit: 1).records.count == 1)
        withExtendedLifetime(fixture) {}   // (its temporary directory goes with it)
    }

    @Test(arguments: [-1.0, Double.nan])
    func aNegativeOrNaNIdleLimitCountsAsZero(idleLimit: Double) async throws {
        // Given a queue with nothing due
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        // When a run starts with a negative or NaN idle limit
        let report = await fixture.queue.run(until: .distantFuture, idleLimit: idleLimit)
        // Then it ends as drained, as with an idle limit of 0
        #expect(report.ending == .drained)
    }
}
