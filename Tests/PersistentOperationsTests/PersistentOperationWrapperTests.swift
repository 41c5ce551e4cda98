import Foundation
import Testing
@testable import PersistentOperations

/// A framework's operation the app does not own: one HTTP-like request, whose status the
/// script of its payload decides, attempt by attempt.
final class ForeignDownload: Operation, @unchecked Sendable {
    // @unchecked: `statusCode` is written by `main()` before the operation finishes and read after.
    let label: String
    let journal: String
    let scriptedStatus: Int
    private(set) var statusCode = 0

    init(name: String, journal: String, status: Int) {
        self.label = name
        self.journal = journal
        self.scriptedStatus = status
    }

    override func main() {
        guard !isCancelled else { return }
        statusCode = scriptedStatus
        Journal.record(journal, "\(label) \(statusCode)")
    }
}

struct DownloadScript: Codable, Sendable, Equatable {
    var name: String
    var journal: String
    /// The status of each attempt (the last one repeats).
    var statuses: [Int]
}

struct DownloadRefused: Error, CustomStringConvertible {
    var status: Int
    var description: String { "the server answered \(status)" }
}

/// The stored wrapper of ``ForeignDownload``: 200 succeeds, 401 retries after 1 s without
/// counting (a token refresh), 503 retries after 10 s (counted), anything else fails for good.
final class StoredDownload: PersistentOperationWrapper<DownloadScript, ForeignDownload>, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.stored-download"

    override func makeBaseOperation(isRetry: Bool) throws -> ForeignDownload {
        let status = payload.statuses[min(numberOfAttempts - 1, payload.statuses.count - 1)]
        return ForeignDownload(name: payload.name, journal: payload.journal, status: status)
    }

    override func attemptResult(of download: ForeignDownload) -> AttemptResult {
        switch download.statusCode {
        case 200: .succeeded
        case 401: .retry(after: 1, countsTowardRetryLimit: false)
        case 503: .retry(after: 10, countsTowardRetryLimit: true)
        default: .failed(DownloadRefused(status: download.statusCode))
        }
    }
}

@Suite("Persistent operation wrapper", .timeLimit(.minutes(1)))
struct PersistentOperationWrapperTests {
    func download(_ fixture: QueueFixture, _ name: String, _ statuses: [Int]) -> StoredDownload {
        StoredDownload(payload: DownloadScript(name: name, journal: fixture.journal, statuses: statuses))
    }

    @Test func eachAttemptRunsAFreshBaseOperationAndEndsAsTheWrapperSays() async throws {
        // Given a download refused once for its token (uncounted), once as busy (counted), then served
        let fixture = try QueueFixture()
        fixture.queue.register(StoredDownload.self)
        let stored = download(fixture, "photo", [401, 503, 200])
        let id = try fixture.queue.addOperation(stored, options: EnqueueOptions(keepsOperationAlive: true)).id

        // When the token refresh has been waited for, and the busy answer saved as a counted retry
        #expect(try await eventually { fixture.lines == ["photo 401"] })
        let refreshed = fixture.clock.now.addingTimeInterval(1)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(refreshed) })
        #expect(try fixture.pendingRecords().first?.numberOfRetries == 0)
        fixture.clock.advance(by: 1)
        #expect(try await eventually { fixture.lines == ["photo 401", "photo 503"] })
        #expect(try await eventually { try fixture.pendingRecords().first?.numberOfRetries == 1 })
        let retryDue = fixture.clock.now.addingTimeInterval(10)
        #expect(try await eventually { fixture.queue.timer.scheduledDates.contains(retryDue) })
        #expect(try fixture.pendingRecords().first?.numberOfAttempts == 2)

        // Then, once the wait is over, the third attempt succeeds with a new base operation
        fixture.clock.advance(by: 10)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["photo 401", "photo 503", "photo 200"])
        #expect(stored.outcome?.isSuccess == true)
        #expect(stored.numberOfAttempts == 3)
        #expect(stored.currentBaseOperation?.statusCode == 200)
        #expect(fixture.deliveredEvents().contains(.succeeded(id)))
    }

    @Test func aFailureForGoodMovesTheRecordToTheFailedAreaWithItsError() async throws {
        let fixture = try QueueFixture()
        fixture.queue.register(StoredDownload.self)
        try fixture.queue.addOperation(download(fixture, "missing", [404]))
        await fixture.queue.allOperationsFinished()
        let failed = try #require(try fixture.queue.failedOperations().first)
        #expect(failed.reason.contains("the server answered 404"))
        #expect(fixture.lines == ["missing 404"])
    }

    @Test func aStoredWrapperIsRebuiltFromItsPayloadAfterARelaunch() async throws {
        // Given a launch that stored a download and ended before it ran
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        do {
            let first = try QueueFixture(suspended: true, directory: directory, journal: journal)
            first.queue.register(StoredDownload.self)
            try first.queue.addOperation(StoredDownload(payload: DownloadScript(name: "later", journal: journal, statuses: [200])))
            first.queue.close()
        }
        // When the next launch restores it
        let fixture = try QueueFixture(directory: directory, journal: journal)
        fixture.queue.register(StoredDownload.self)
        #expect(try fixture.queue.restore().restored.count == 1)
        await fixture.queue.allOperationsFinished()
        // Then it ran its base operation once, and its record is gone
        #expect(fixture.lines == ["later 200"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func cancellingTheWrapperCancelsItsBaseOperationAndEndsCancelled() async throws {
        let fixture = try QueueFixture(suspended: true)
        fixture.queue.register(StoredDownload.self)
        let stored = download(fixture, "cancelled", [200])
        let id = try fixture.queue.addOperation(stored, options: EnqueueOptions(keepsOperationAlive: true)).id
        #expect(fixture.queue.cancelOperation(withID: id))
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines.isEmpty)
        #expect(stored.finishedCancelled)
        #expect(try fixture.pendingRecords().isEmpty)
    }
}
