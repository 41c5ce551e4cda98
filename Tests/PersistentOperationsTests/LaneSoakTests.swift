import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The lane soak, bounded for CI: `crash-demo lanes-soak` SIGKILLs a chat-outbox app whose
/// conversations are ordered lanes at aimed-at moments over 14 launches, then lets one more
/// launch drain the lanes. A longer run is a documented command:
///
///     swift run crash-demo lanes-soak --cycles 200 --count 8 --seed 7
@Suite("Lane soak", .timeLimit(.minutes(2)), .serialized)
struct LaneSoakTests {
    static let cycles = 14
    static let messagesPerCycle = 8
    static let plan = LanePlan(lanes: 4)

    @Test func killedAtAimedMomentsAndRelaunchedEachLaneRunsOneMessageAtATimeInAddOrderAndMovesOn() async throws {
        // Given the soak driver killing the app while it restores, adds, runs an attempt, waits
        // for a retry, hands a lane over, or cancels, with messages in four lanes that succeed,
        // retry, fail for good, are cancelled, expire, or (in the lane that holds on a failure)
        // fail once and are re-queued or purged
        let directory = try TemporaryDirectory()
        let arguments = [
            "lanes-soak", "--cycles", "\(Self.cycles)", "--count", "\(Self.messagesPerCycle)", "--lanes", "\(Self.plan.lanes)",
            "--seed", "20260214", "--directory", directory.url.path,
        ]
        // When it runs, then lets a last launch drain the lanes
        let (status, output) = try await onDedicatedThread { () -> (Int32, String) in
            let pipe = Pipe()
            let soak = try ChildApp.launch(arguments, output: pipe.fileHandleForWriting)
            try? pipe.fileHandleForWriting.close()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            try ChildApp.waitForExit(soak, timeout: 90)
            return (soak.terminationStatus, String(decoding: output, as: UTF8.self))
        }
        print(output)

        // Then the driver's own checks pass
        #expect(status == 0, "\(output)")
        #expect(output.contains("lanes soak: PASS"))
        // And the lane contract holds over the journal and the store as this suite reads them:
        // one message of a lane in flight at a time, first attempts in add order, no message
        // pending or holding its lane at the end, none lost
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let verifier = LaneSoakVerifier(
            events: try LaneJournalEvent.all(at: effects), stored: try Self.storedMessages(in: directory.store),
            count: Self.cycles * Self.messagesPerCycle, plan: Self.plan
        )
        let problems = verifier.problems.count
        #expect(problems == 0, "\(verifier.problems.prefix(20).joined(separator: "\n"))")
        let tally = verifier.tally
        // And the kills came mid-run: most launches were cut, some with attempts in flight
        #expect(tally.launchesCut >= Self.cycles / 2, "only \(tally.launchesCut) launches were cut by a kill")
        #expect(tally.launchesCutMidAttempt > 0 && tally.attemptsCut > 0)
        #expect(tally.launchesFinished >= 1)
        // And every way a message ends happened, with the lanes running side by side
        #expect(tally.succeeded > 0 && tally.failedForGood > 0 && tally.expired > 0 && tally.cancelled > 0)
        #expect(tally.retries > 0 && tally.requeues + tally.purged > 0)
        #expect(tally.firstAttemptsChecked > Self.cycles * Self.messagesPerCycle / 2)
        #expect(tally.mostLanesInFlight > 1)
        #expect(try directory.names(in: "quarantine").isEmpty)
    }

    /// Every lane message the store holds, pending or failed, for ``LaneSoakVerifier``.
    static func storedMessages(in store: URL) throws -> [LaneStoredMessage] {
        let onDisk = try ReadOnlyPersistentStore(directory: store)
        let pending = try onDisk.pendingRecords()
        let failed = try onDisk.failedRecords()
        #expect(pending.unreadable.isEmpty && failed.unreadable.isEmpty)
        return try (pending.records + failed.records).map { record in
            LaneStoredMessage(
                index: try RecordFormat.decodePayload(LaneMessage.self, from: record.payload).index, isFailed: record.area == .failed,
                failureReason: record.failureReason, expirationDate: record.expirationDate, isHoldingLane: record.isHoldingLane
            )
        }
    }
}
