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

    /// A payload that refuses to encode when asked to (`refuses`).
    final class Refusing: Operation, PersistentOperation, @unchecked Sendable {
        struct Refusal: Error { let index: Int }
        struct Payload: Codable, Sendable, Equatable {
            var index: Int
            var refuses: Bool
            enum CodingKeys: String, CodingKey { case index, refuses }
            init(index: Int, refuses: Bool) { self.index = index; self.refuses = refuses }
            func encode(to encoder: any Encoder) throws {
                if refuses { throw Refusal(index: index) }
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(index, forKey: .index)
                try container.encode(refuses, forKey: .refuses)
            }
        }
        static let persistenceIdentifier = "test.refusing"
        let payload: Payload
        init(payload: Payload) { self.payload = payload }
    }

    @Test func aLargeBatchWithPayloadsThatDoNotEncodeNamesTheFirstAndStoresNothing() throws {
        // Given a batch large enough to be encoded on several threads, whose members 300 and
        // 700 refuse to encode
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        fixture.queue.register(Refusing.self)
        let members = (0..<1_000).map { Refusing(payload: .init(index: $0, refuses: $0 == 300 || $0 == 700)) }
        // When it is added, the error is the first member's
        let error = #expect(throws: PersistenceError.self) { try fixture.queue.addOperations(members) }
        #expect(error?.code == .payloadNotEncodable)
        #expect((error?.underlyingError as? Refusing.Refusal)?.index == 300)
        // And nothing was stored; the queue still takes a batch
        #expect(try fixture.pendingRecords().isEmpty)
        let stored = try fixture.queue.addOperations((0..<600).map { Refusing(payload: .init(index: $0, refuses: false)) })
        #expect(stored.count == 600)
        #expect(try fixture.pendingRecords().count == 600)
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
