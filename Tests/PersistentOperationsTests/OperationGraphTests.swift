import Foundation
import Testing
@testable import PersistentOperations

/// Dependencies between stored operations: honoured in the process, saved with the records,
/// rebuilt by restore; failure and cancellation propagation; batches stored all or none.
@Suite("Persistent queue: operation graphs", .timeLimit(.minutes(2)))
struct OperationGraphTests {
    /// The position of the first event matching `isMatch`, or `Int.max`.
    static func position(of isMatch: (PersistentOperationEvent) -> Bool, in events: [PersistentOperationEvent]) -> Int {
        events.firstIndex(where: isMatch) ?? .max
    }

    static func started(_ id: PersistentOperationID?) -> (PersistentOperationEvent) -> Bool {
        { if case .started(id, _) = $0 { return true } else { return false } }
    }

    static func succeeded(_ id: PersistentOperationID?) -> (PersistentOperationEvent) -> Bool {
        { $0 == .succeeded(id!) }
    }

    /// Checks from the events that no operation started before each of its prerequisites
    /// succeeded, and returns how many edges were checked.
    @discardableResult
    static func expectOrder(_ edges: [(prerequisite: Operation, dependent: Operation)], in fixture: QueueFixture, ids: [ObjectIdentifier: PersistentOperationID]) -> Int {
        let events = fixture.deliveredEvents()
        for (prerequisite, dependent) in edges {
            let prerequisiteID = ids[ObjectIdentifier(prerequisite)]
            let dependentID = ids[ObjectIdentifier(dependent)]
            let success = position(of: succeeded(prerequisiteID), in: events)
            let start = position(of: started(dependentID), in: events)
            #expect(success < .max, "prerequisite \(String(describing: prerequisiteID)) never succeeded")
            #expect(success < start, "\(String(describing: dependentID)) started before \(String(describing: prerequisiteID)) succeeded")
        }
        return edges.count
    }

    // MARK: In-process ordering

    @Test(arguments: [true, false])
    func diamondsRunInDependencyOrderWhilePrerequisitesRetry(asynchronous: Bool) async throws {
        // Given an unbounded queue and 10 diamonds (album ← two photos ← publish) whose album
        // retries once counted and once uncounted before it succeeds
        let fixture = try QueueFixture(maxConcurrent: -1)
        var edges: [(prerequisite: Operation, dependent: Operation)] = []
        var ids: [ObjectIdentifier: PersistentOperationID] = [:]
        func make(_ name: String, _ steps: [UploadStep] = [.succeed]) -> RetryingOperation {
            asynchronous ? fixture.upload(name, steps, retryDelay: 1) : fixture.syncUpload(name, steps, retryDelay: 1)
        }
        func add(_ operation: RetryingOperation) throws {
            if let upload = operation as? ScriptedUpload { try fixture.queue.addOperation(upload) }
            if let upload = operation as? SyncScriptedUpload { try fixture.queue.addOperation(upload) }
            ids[ObjectIdentifier(operation)] = fixture.queue.identifier(of: operation)
        }
        for diamond in 0..<10 {
            let album = make("album\(diamond)", [.retry, .retryUncounted, .succeed])
            let photos = [make("photo\(diamond)a"), make("photo\(diamond)b")]
            let publish = make("publish\(diamond)")
            try add(album)
            for photo in photos {
                photo.addDependency(album)
                publish.addDependency(photo)
                edges += [(album, photo), (photo, publish)]
                try add(photo)
            }
            try add(publish)
        }
        // When the clock lets every retry through, once the ten albums' waits are all in the
        // queue's timer (a `retryScheduled` event comes before its wait's timer is set: a clock
        // moved on the event alone may pass before the timer is set, which then never fires)
        for _ in 0..<2 {
            let due = fixture.clock.now.addingTimeInterval(1)
            #expect(try await eventually { fixture.queue.timer.scheduledDates.filter { $0 == due }.count == 10 })
            fixture.clock.advance(by: 1)
        }
        await fixture.queue.allOperationsFinished()
        // Then every dependent started only after each of its prerequisites succeeded
        #expect(Self.expectOrder(edges, in: fixture, ids: ids) == 40)
        #expect(fixture.lines.count == 60)   // 10 albums × 3 attempts, 30 others × 1
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(try fixture.failedRecords().isEmpty)
    }

    @Test func plainSynchronousOperationsAndFanInWaitForEveryPrerequisite() async throws {
        // Given five plain operations and one that depends on all of them, on a 4-slot queue
        let fixture = try QueueFixture(maxConcurrent: 4, suspended: true)
        let sources = (0..<5).map { fixture.note("source\($0)") }
        let sink = fixture.note("sink")
        var ids: [ObjectIdentifier: PersistentOperationID] = [:]
        for source in sources {
            try fixture.queue.addOperation(source)
            ids[ObjectIdentifier(source)] = fixture.queue.identifier(of: source)
            sink.addDependency(source)
        }
        try fixture.queue.addOperation(sink)
        let sinkID = try #require(fixture.queue.identifier(of: sink))
        ids[ObjectIdentifier(sink)] = sinkID
        // Then, before anything runs, the sink waits for all five and holds no slot
        let info = try #require(fixture.queue.operation(withID: sinkID))
        #expect(info.state == .waitingForPrerequisites)
        #expect(Set(info.unfinishedPrerequisites) == Set(sources.compactMap { ids[ObjectIdentifier($0)] }))
        #expect(try fixture.queue.counts().waitingForPrerequisites == 1)
        #expect(fixture.queue.operationQueue.operationCount == 5)
        // When the queue runs
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        // Then the sink ran last, after every source succeeded
        #expect(fixture.lines.last == "sink ran")
        #expect(Self.expectOrder(sources.map { ($0, sink) }, in: fixture, ids: ids) == 5)
        #expect(sink.dependencies.count == 5)   // Foundation's own list is left as the user set it
    }

    @Test func aPrerequisiteThatAlreadySucceededIsSatisfied() async throws {
        // Given an operation that has run and succeeded
        let fixture = try QueueFixture()
        let album = fixture.upload("album")
        try fixture.queue.addOperation(album)
        await fixture.queue.allOperationsFinished()
        // When a dependent is added afterwards
        let photo = fixture.upload("photo")
        photo.addDependency(album)
        try fixture.queue.addOperation(photo)
        // Then it is stored with nothing to wait for, and runs
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["album#1 retry=false retries=0", "photo#1 retry=false retries=0"])
        #expect(photo.outcome?.isSuccess == true)
    }

    // MARK: Propagation

    @Test func dependentsOfAFailedPrerequisiteFailNamingItAndTheQueueDrains() async throws {
        // Given a diamond whose album fails for good
        let fixture = try QueueFixture(maxConcurrent: 2)
        let album = fixture.upload("album", [.fail])
        let photo = fixture.upload("photo")
        let note = fixture.note("note")
        let publish = fixture.upload("publish")
        photo.addDependency(album)
        note.addDependency(album)
        publish.addDependency(photo)
        publish.addDependency(note)
        let ids = try fixture.queue.addOperations([album, photo, note, publish])
        // When it runs
        await fixture.queue.allOperationsFinished()
        // Then only the album ran; every dependent is in the failed area naming its prerequisite
        #expect(fixture.lines == ["album#1 retry=false retries=0"])
        let failed = try fixture.queue.failedOperations()
        #expect(Set(failed.map(\.id)) == Set(ids))
        let byID = Dictionary(uniqueKeysWithValues: failed.map { ($0.id, $0) })
        #expect(byID[ids[0]]?.failedPrerequisite == nil)
        #expect(byID[ids[1]]?.failedPrerequisite == ids[0])
        #expect(byID[ids[2]]?.failedPrerequisite == ids[0])
        #expect(byID[ids[3]]?.failedPrerequisite != nil)
        #expect(byID[ids[1]]?.reason.contains("prerequisite \(ids[0]) failed for good") == true)
        #expect(try fixture.pendingRecords().isEmpty)
        // And the live operations ended: the retrying one failed with the reason, the plain one cancelled
        #expect((photo.outcome?.error as? PersistenceError)?.code == .prerequisiteFailed)
        #expect(note.isFinished && note.isCancelled)
        #expect(fixture.deliveredEvents().contains(.abandoned(ids[1], prerequisite: ids[0])))
    }

    @Test func cancellingAPrerequisiteCancelsItsDependents() async throws {
        // Given an album whose attempt hangs, and a chain behind it
        let fixture = try QueueFixture()
        let events = fixture.queue.events
        let album = fixture.upload("album", [.hang])
        let photo = fixture.upload("photo")
        let publish = fixture.upload("publish")
        photo.addDependency(album)
        publish.addDependency(photo)
        let ids = try fixture.queue.addOperations([album, photo, publish])
        for await event in events {
            if case .started(ids[0], _) = event { break }
        }
        // When the album is cancelled by id
        fixture.queue.cancelOperation(withID: ids[0])
        await fixture.queue.allOperationsFinished()
        // Then every record is gone, the dependents never ran and ended cancelled
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(try fixture.failedRecords().isEmpty)
        #expect(fixture.lines == ["album#1 retry=false retries=0"])
        #expect(photo.isCancelled && photo.isFinished && publish.isCancelled && publish.isFinished)
        let delivered = fixture.deliveredEvents()
        #expect(delivered.contains(.abandoned(ids[2], prerequisite: ids[1])))
        // The dependents' records went before the prerequisite's
        let albumGone = Self.position(of: { $0 == .cancelled(ids[0]) }, in: delivered)
        #expect(Self.position(of: { $0 == .cancelled(ids[1]) }, in: delivered) < albumGone)
        #expect(Self.position(of: { $0 == .cancelled(ids[2]) }, in: delivered) < albumGone)
    }

    @Test func cancellingABlockedDependentLeavesItsPrerequisiteRunning() async throws {
        // Given a dependent waiting for a prerequisite that waits for a retry
        let fixture = try QueueFixture()
        let album = fixture.upload("album", [.retry, .succeed], retryDelay: 5)
        let photo = fixture.upload("photo")
        photo.addDependency(album)
        let ids = try fixture.queue.addOperations([album, photo])
        await fixture.clock.waitForScheduledRetries(count: 1)
        // When the dependent is cancelled
        #expect(fixture.queue.cancelOperation(withID: ids[1]))
        fixture.clock.advance(by: 5)
        await fixture.queue.allOperationsFinished()
        // Then it never ran, and the prerequisite still succeeded
        #expect(photo.isCancelled && photo.isFinished)
        #expect(album.outcome?.isSuccess == true)
        #expect(fixture.lines == ["album#1 retry=false retries=0", "album#2 retry=true retries=1"])
    }

    @Test func reQueueingAFailedPrerequisiteBringsBackTheDependentsItFailed() async throws {
        // Given an album that fails on its first attempt and succeeds on its second, and a chain behind it
        let fixture = try QueueFixture()
        let album = fixture.upload("album", [.fail, .succeed])
        let photo = fixture.upload("photo")
        let publish = fixture.note("publish")
        photo.addDependency(album)
        publish.addDependency(photo)
        let ids = try fixture.queue.addOperations([album, photo, publish])
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.failedRecords().count == 3)
        // When only the album is re-queued (the queue suspended, so that the album cannot run
        // and release its dependents before they are looked at)
        fixture.queue.isSuspended = true
        try fixture.queue.retryFailedOperation(withID: ids[0])
        // Then its dependents come back with it, waiting for it, and all run in order
        #expect(fixture.queue.operation(withID: ids[1])?.state == .waitingForPrerequisites)
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.failedRecords().isEmpty)
        #expect(Array(fixture.lines.suffix(3)) == ["album#2 retry=true retries=0", "photo#1 retry=false retries=0", "publish ran"])
    }

    @Test func reQueueingADependentAloneFailsItAgainWhileItsPrerequisiteIsFailed() async throws {
        let fixture = try QueueFixture()
        let album = fixture.upload("album", [.fail])
        let photo = fixture.upload("photo")
        photo.addDependency(album)
        let ids = try fixture.queue.addOperations([album, photo])
        await fixture.queue.allOperationsFinished()
        // When the dependent alone is re-queued
        try fixture.queue.retryFailedOperation(withID: ids[1])
        await fixture.queue.allOperationsFinished()
        // Then it is back in the failed area without having run
        #expect(Set(try fixture.queue.failedOperations().map(\.id)) == Set(ids))
        #expect(fixture.lines == ["album#1 retry=false retries=0"])
    }

    // MARK: Errors

    @Test func aDependencyOnAnOperationThisQueueDoesNotStoreIsRefusedAndNothingIsStored() async throws {
        let fixture = try QueueFixture()
        let other = try QueueFixture()
        let foreign = other.upload("foreign")
        try other.queue.addOperation(foreign)
        // Refused dependents are kept until their prerequisites finish: Linux Foundation's
        // `Operation` keeps an unretained reference to each dependent and touches it then.
        var refused: [Operation] = []
        defer { withExtendedLifetime(refused) {} }
        for prerequisite in [BlockOperation {}, fixture.upload("not added"), foreign] as [Operation] {
            // Given a dependency on a plain operation, one never added, or another queue's
            let photo = fixture.upload("photo")
            refused.append(photo)
            photo.addDependency(prerequisite)
            // When it is added, then a clear error says why, and nothing was stored
            let error = #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(photo) }
            #expect(error?.code == .invalidDependency)
            #expect(error?.message.contains("does not store") == true)
            #expect(try fixture.pendingRecords().isEmpty)
        }
        // And other work is unaffected
        try fixture.queue.addOperation(fixture.upload("fine"))
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["fine#1 retry=false retries=0"])
        await other.queue.allOperationsFinished()
        #expect(refused.count == 3)
    }

    @Test func aCycleInABatchIsRefused() throws {
        // (A self-dependency is refused the same way, where Foundation lets one be made: Linux
        // Foundation's `addDependency(_:)` deadlocks when an operation is given itself.)
        let fixture = try QueueFixture(suspended: true)
        let a = fixture.upload("a"), b = fixture.upload("b"), c = fixture.upload("c")
        a.addDependency(c)
        b.addDependency(a)
        c.addDependency(b)
        let error = #expect(throws: PersistenceError.self) { try fixture.queue.addOperations([a, b, c, fixture.upload("free")]) }
        #expect(error?.code == .invalidDependency)
        #expect(error?.message.contains("cycle") == true)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aDependentOfAFailedPrerequisiteIsRefusedWhenAdded() async throws {
        let fixture = try QueueFixture()
        let album = fixture.upload("album", [.fail])
        try fixture.queue.addOperation(album)
        await fixture.queue.allOperationsFinished()
        let photo = fixture.upload("photo")
        photo.addDependency(album)
        let error = #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(photo) }
        #expect(error?.code == .prerequisiteFailed)
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test(arguments: [true, false])
    func aDependentOfAnOperationAbandonedWithItsPrerequisiteIsRefusedAsEnded(prerequisiteFails: Bool) async throws {
        // Given an album that fails for good (or is cancelled), and a photo abandoned with it
        let fixture = try QueueFixture()
        let events = fixture.queue.events
        let album = fixture.upload("album", prerequisiteFails ? [.fail] : [.hang])
        let photo = fixture.upload("photo")
        photo.addDependency(album)
        let ids = try fixture.queue.addOperations([album, photo])
        if !prerequisiteFails {
            for await event in events {
                if case .started(ids[0], _) = event { break }
            }
            fixture.queue.cancelOperation(withID: ids[0])
        }
        await fixture.queue.allOperationsFinished()
        // When an operation that depends on the photo is added
        let publish = fixture.upload("publish")
        publish.addDependency(photo)
        let error = #expect(throws: PersistenceError.self) { try fixture.queue.addOperation(publish) }
        // Then it is refused because the photo ended with its prerequisite, not as an
        // operation the queue does not store
        #expect(error?.code == .prerequisiteFailed)
        #expect(error?.message.contains(prerequisiteFails ? "failed for good" : "was cancelled") == true)
        #expect(try fixture.pendingRecords().isEmpty)
        #expect(fixture.lines == ["album#1 retry=false retries=0"])
    }

    @Test func badInputInAnyMemberRejectsTheWholeBatch() throws {
        let fixture = try QueueFixture(suspended: true)
        final class Unregistered: Operation, PersistentOperation, @unchecked Sendable {
            static let persistenceIdentifier = "test.unregistered"
            let payload: Int
            init(payload: Int) { self.payload = payload }
        }
        var dollarNull = fixture.upload("x").payload
        dollarNull.name = "$null"
        let cases: [(PersistenceError.Code, any PersistentOperation)] = [
            (.unknownType, Unregistered(payload: 1)),
            (.payloadDoesNotRoundTrip, ScriptedUpload(payload: dollarNull)),
        ]
        for (code, bad) in cases {
            let error = #expect(throws: PersistenceError.self) {
                try fixture.queue.addOperations([fixture.upload("good1"), bad, fixture.upload("good2")])
            }
            #expect(error?.code == code)
            #expect(try fixture.pendingRecords().isEmpty)
            #expect(try fixture.directory.names(in: "batches").isEmpty)
        }
    }

    @Test func aRecordOverTheSizeCapRejectsTheWholeBatch() throws {
        let directory = try TemporaryDirectory()
        var configuration = PersistentOperationQueue.Configuration()
        configuration.maximumRecordSize = 2_000
        let suspended = OperationQueue()
        suspended.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: suspended, configuration: configuration)
        queue.register(ScriptedUpload.self)
        let small = ScriptedUpload(payload: UploadPayload(name: "small", journal: "j"))
        let large = ScriptedUpload(payload: UploadPayload(name: String(repeating: "x", count: 3_000), journal: "j"))
        let error = #expect(throws: PersistenceError.self) { try queue.addOperations([small, large]) }
        #expect(error?.code == .recordTooLarge)
        #expect(try directory.names(in: "pending").isEmpty)
    }

    // MARK: On disk and across launches

    @Test func aBatchIsStoredAsOneFrameAndTheGraphIsRestored() async throws {
        // Given a diamond added as one batch to a suspended queue, then the queue closed
        let directory = try TemporaryDirectory()
        let first = try QueueFixture(suspended: true, directory: directory)
        let album = first.upload("album"), photo1 = first.upload("p1"), photo2 = first.upload("p2"), publish = first.note("publish")
        photo1.addDependency(album)
        photo2.addDependency(album)
        publish.addDependency(photo1)
        publish.addDependency(photo2)
        let ids = try first.queue.addOperations([publish, photo2, album, photo1])
        let records = try first.pendingRecords()
        #expect(records.count == 4)
        // One batch frame in the journal: whole by construction, so no commit marker file and
        // no batch identifier in each record
        #expect(records.allSatisfy { $0.batchID == nil })
        #expect(try directory.names(in: "batches").isEmpty)
        #expect(records.first { $0.id == ids[0].rawValue }?.prerequisites.count == 2)
        first.queue.close()
        // When a new launch restores it (its queue suspended until the graph is checked: on a
        // busy machine the whole diamond could otherwise have run by then)
        let second = try QueueFixture(maxConcurrent: 4, suspended: true, directory: directory, journal: first.journal)
        let report = try second.queue.restore()
        #expect(Set(report.restored) == Set(ids))
        #expect(second.queue.operation(withID: ids[0])?.state == .waitingForPrerequisites)
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()
        // Then the graph held: the album first, the publish last
        #expect(second.lines.first == "album#1 retry=false retries=0")
        #expect(second.lines.last == "publish ran")
        #expect(second.lines.count == 4)
    }

    @Test func aBatchInterruptedBeforeItsMarkerIsDiscardedWhole() throws {
        // Given the records of a batch on disk, in the earlier layout of one file per record,
        // without a commit marker (a crash before it)
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let batch = UUID().uuidString
        var records: [OperationRecord] = []
        for index in 0..<3 {
            var record = try makeRecord(index: index)
            record.typeIdentifier = ScriptedUpload.persistenceIdentifier
            record.payload = try RecordFormat.encodePayload(UploadPayload(name: "b\(index)", journal: "j"))
            record.batchID = batch
            records.append(record)
            try store.add(record)
        }
        var single = records[0]
        single.id = UUID().uuidString
        single.batchID = nil
        try store.add(single)
        store.close()
        // When a launch restores the store (migrating it to the journal)
        let fixture = try QueueFixture(suspended: true, directory: directory)
        let report = try fixture.queue.restore()
        // Then none of the batch is restored or left on disk, and the lone record is
        #expect(try directory.names(in: "pending").isEmpty)
        #expect(Set(report.discardedFromUncommittedBatches.map(\.rawValue)) == Set(records.map(\.id)))
        #expect(report.restored.map(\.rawValue) == [single.id])
        #expect(try fixture.pendingRecords().map(\.id) == [single.id])
    }

    @Test func aRestoredDependentOfAFailedPrerequisiteFailsAndOneOfASucceededPrerequisiteRuns() async throws {
        // Given records naming prerequisites: one in the failed area, one gone (succeeded)
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        func record(_ name: String, prerequisites: [String] = []) throws -> OperationRecord {
            var record = try makeRecord(index: 0)
            record.id = UUID().uuidString
            record.typeIdentifier = ScriptedUpload.persistenceIdentifier
            record.payload = try RecordFormat.encodePayload(UploadPayload(name: name, journal: "restored-graph"))
            record.prerequisites = prerequisites
            return record
        }
        let failedPrerequisite = try record("failed")
        try store.add(failedPrerequisite)
        _ = try store.moveToFailed(failedPrerequisite, reason: "refused")
        let doomed = try record("doomed", prerequisites: [failedPrerequisite.id])
        let behindDoomed = try record("behind-doomed", prerequisites: [doomed.id])
        let free = try record("free", prerequisites: [UUID().uuidString])
        for item in [doomed, behindDoomed, free] { try store.add(item) }
        store.close()
        // When restored
        let fixture = try QueueFixture(directory: directory, journal: "restored-graph")
        let report = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        // Then the dependents of the failed one failed, transitively; the other ran
        #expect(Set(report.failedWithTheirPrerequisites.map(\.rawValue)) == [doomed.id, behindDoomed.id])
        #expect(fixture.lines == ["free#1 retry=false retries=0"])
        let failed = try fixture.queue.failedOperations()
        #expect(failed.first { $0.id.rawValue == behindDoomed.id }?.failedPrerequisite?.rawValue == doomed.id)
    }

    @Test func aDependentOfAnUnregisteredTypeIsHeldOnDiskUntouched() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        var unknown = try makeRecord(index: 1)
        unknown.typeIdentifier = "test.not-registered"
        var dependent = try makeRecord(index: 2)
        dependent.typeIdentifier = ScriptedUpload.persistenceIdentifier
        dependent.payload = try RecordFormat.encodePayload(UploadPayload(name: "held", journal: "j"))
        dependent.prerequisites = [unknown.id]
        try store.add(unknown)
        try store.add(dependent)
        store.close()
        let fixture = try QueueFixture(directory: directory)
        let report = try fixture.queue.restore()
        #expect(report.heldForUnavailablePrerequisites.map(\.rawValue) == [dependent.id])
        #expect(report.restored.isEmpty)
        fixture.queue.waitUntilAllOperationsAreFinished()   // nothing it could run is pending
        #expect(Set(try fixture.pendingRecords().map(\.id)) == [unknown.id, dependent.id])
    }

    @Test func aChainOf10000DependentOperationsRunsEveryOneOnceInOrder() async throws {
        // Given a chain of 10,000 plain operations (1,000 under the sanitizer), each depending
        // on the one before, added in batches to a suspended queue
        let length = isRunningUnderThreadSanitizer ? 1_000 : 10_000
        let fixture = try QueueFixture(maxConcurrent: 1, suspended: true)
        var previous: PlainNote?
        var operations: [PlainNote] = []
        for index in 0..<length {
            let note = fixture.note("n\(index)")
            if let previous { note.addDependency(previous) }
            operations.append(note)
            previous = note
        }
        for batch in stride(from: 0, to: length, by: 1_000) {
            try fixture.queue.addOperations(Array(operations[batch..<min(batch + 1_000, length)]))
        }

        // When the queue runs
        fixture.queue.isSuspended = false
        await fixture.queue.allOperationsFinished()

        // Then every one ran once, in chain order. (That the time grows linearly with the
        // chain's length — a quadratic scheduler, like Linux's OperationQueue with parked
        // operations, took 15 s for 10,000 — is measured by benchmark P9.)
        #expect(fixture.lines == (0..<length).map { "n\($0) ran" })
        // (read once the queue is closed, when nothing more is written)
        fixture.queue.close()
        #expect(try fixture.pendingRecords().isEmpty)
    }
}
