import Foundation
import Testing
@testable import PersistentOperations

/// Crash evidence kept in the journal: attempt frames instead of marker files.
@Suite(.timeLimit(.minutes(1)))
struct JournalAttemptMarkerTests {
    /// The kinds of the frames in the store's journal, in order.
    private func frameKinds(_ directory: TemporaryDirectory) throws -> [JournalFrame.Kind] {
        let journal = directory.path("journal")
        return try FileManager.default.contentsOfDirectory(atPath: journal)
            .compactMap(JournalSegmentName.init(fileName:)).sorted()
            .flatMap { name in
                let bytes = try Data(contentsOf: URL(fileURLWithPath: journal + "/" + name.fileName))
                return try JournalSegment.scan(bytes).frames.map(\.frame.kind)
            }
    }

    @Test func markersSurviveReopeningAndEndWithTheirAttemptsRemovalOrFailure() throws {
        // Given four pending records, each with an attempt in flight
        let directory = try TemporaryDirectory()
        let records = try (1...4).map { try makeRecord(index: $0) }
        do {
            let store = try JournalStore(directory: directory.store)
            for record in records { try store.add(record) }
            try store.setAttemptMarker(AttemptMarker(attempts: 2, crashes: 1, kills: 0, runsAlone: true), forRecord: records[0].id)
            for record in records.dropFirst() { try store.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: record.id) }
            // When one attempt ends, one record completes and one fails for good
            try store.setAttemptMarker(nil, forRecord: records[1].id)
            try store.removePending(id: records[2].id)
            _ = try store.moveToFailed(records[3], reason: "gave up")
            #expect(Set(store.attemptMarkers().keys) == [records[0].id])
            store.close()
        }

        // Then a new open finds the one attempt still in flight, with everything it carried
        let reopened = try JournalStore(directory: directory.store)
        defer { reopened.close() }
        #expect(reopened.attemptMarkers() == [records[0].id: AttemptMarker(attempts: 2, crashes: 1, kills: 0, runsAlone: true)])
        // And a marker can be set only for a pending record
        #expect(throws: PersistenceError.self) { try reopened.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: records[2].id) }
        #expect(throws: PersistenceError.self) { try reopened.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: "not-an-id") }
    }

    @Test func anOperationsLifecycleWritesOneAttemptFrameAndNoMarkerFile() async throws {
        // Given a running queue
        let fixture = try QueueFixture()

        // When an operation runs and succeeds
        try fixture.queue.addOperation(fixture.upload("one"))
        #expect(try await eventually { fixture.lines.count == 1 })
        await onDedicatedThread { fixture.queue.waitUntilAllOperationsAreFinished() }
        fixture.queue.close()

        // Then the journal holds its record, one attempt frame and its removal: the attempt's
        // end needs no frame of its own, and no marker file was made
        #expect(try frameKinds(fixture.directory) == [.put, .attempt, .remove])
        #expect(try fixture.directory.names(in: "attempts").filter { $0.hasSuffix(".attempt") }.isEmpty)
    }

    @Test func compactionKeepsTheMarkersOfTheSegmentsItMerges() throws {
        // Given markers whose frames sit in segments that compaction merges, one of them set
        // again afterwards
        let directory = try TemporaryDirectory()
        let records = try (1...3).map { try makeRecord(index: $0) }
        let filler = try (10..<40).map { try makeRecord(index: $0) }
        do {
            let store = try JournalStore(directory: directory.store)
            for record in records + filler { try store.add(record) }
            try store.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: records[0].id)
            try store.setAttemptMarker(AttemptMarker(attempts: 3, crashes: 2), forRecord: records[1].id)
            for record in filler { try store.removePending(id: record.id) }
            // A rewrite after the marker: the record moves on, its marker stays in the old segment
            var rewritten = records[1]
            rewritten.numberOfRetries = 1
            try store.update(rewritten)

            // When the journal is compacted, then a marker changes
            try store.compact()
            #expect(store.compactionCount >= 1)
            try store.setAttemptMarker(AttemptMarker(attempts: 2), forRecord: records[0].id)
            #expect(store.attemptMarkers().count == 2)
            store.close()
        }

        // Then a new open finds both markers, the later change winning
        let reopened = try JournalStore(directory: directory.store)
        defer { reopened.close() }
        #expect(reopened.attemptMarkers() == [
            records[0].id: AttemptMarker(attempts: 2),
            records[1].id: AttemptMarker(attempts: 3, crashes: 2),
        ])
    }

    @Test func aStoreShortOfSpaceRecordsNoAttemptsSoThatRemovalsHaveRoom() throws {
        // Given a store whose space reserve went to a removal on a full disk
        let directory = try TemporaryDirectory()
        let store = try JournalStore(directory: directory.store)
        defer { store.close() }
        let record = try makeRecord(index: 1)
        try store.add(record)
        store.state.withLock { state in _ = store.releaseReserve(&state) }

        // When an attempt starts, it is not recorded: a clear error, and the record is intact
        #expect(throws: PersistenceError.self) { try store.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: record.id) }
        #expect(store.attemptMarkers().isEmpty)
        #expect(try store.readPending(id: record.id) == record)

        // And once the reserve is made again, attempts are recorded again
        store.ensureReserve()
        #expect(store.hasSpaceReserve)
        try store.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: record.id)
        #expect(store.attemptMarkers() == [record.id: AttemptMarker(attempts: 1)])
    }
}
