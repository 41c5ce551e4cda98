import Foundation
import Testing
@testable import PersistentOperations

/// The queue keeps no payload in memory once an operation is stored; every rewrite of a record
/// (a retry, the end of a period, a failure, a prerequisite's failure) carries the stored one.
@Suite("Persistent queue: entries without payloads", .timeLimit(.minutes(1)))
struct EntryPayloadTests {
    @Test func anAddedOperationsEntryHoldsNoPayloadAndItsRetryAndFailureKeepTheStoredOne() async throws {
        // Given an upload added in this process that retries once, then fails for good, and a
        // dependent added after it
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let flaky = fixture.upload("flaky", [.retry, .fail], retryDelay: 30)
        let after = fixture.upload("after")
        after.addDependency(flaky)
        let added = try fixture.queue.addOperation(flaky, options: EnqueueOptions())
        let dependent = try fixture.queue.addOperation(after, options: EnqueueOptions())
        // Then neither entry holds the payload the store holds
        let entries = fixture.queue.state.withLock { state in [state.entries[added.id.rawValue], state.entries[dependent.id.rawValue]] }
        #expect(entries.allSatisfy { $0?.record.payload.isEmpty == true })

        // When its first attempt asks for a retry, the pending record keeps its payload
        #expect(try await eventually {
            try fixture.pendingRecords().first { $0.id == added.id.rawValue }?.nextAttemptAt == start.addingTimeInterval(30)
        })
        let pending = try #require(try fixture.pendingRecords().first { $0.id == added.id.rawValue })
        #expect(try RecordFormat.decodePayload(UploadPayload.self, from: pending.payload) == flaky.payload)

        // When its retry fails for good
        await fixture.clock.waitForTotalScheduledRetries(count: 1)
        fixture.clock.advance(by: 30)
        #expect(try await eventually { try fixture.failedRecords().count == 2 })
        // Then both failed records, its own and its dependent's, carry their payloads, and
        // no store error was reported
        let failed = try fixture.failedRecords()
        let failedFlaky = try #require(failed.first { $0.id == added.id.rawValue })
        let failedAfter = try #require(failed.first { $0.id == dependent.id.rawValue })
        #expect(try RecordFormat.decodePayload(UploadPayload.self, from: failedFlaky.payload) == flaky.payload)
        #expect(try RecordFormat.decodePayload(UploadPayload.self, from: failedAfter.payload) == after.payload)
        #expect(!fixture.deliveredEvents().contains { if case .storeError = $0 { return true } else { return false } })
    }
}
