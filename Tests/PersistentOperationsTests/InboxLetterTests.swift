import Foundation
import Testing
@testable import PersistentOperations

/// Operations other processes add through the store's inbox (`PersistentOperationInbox`):
/// taken in at restore and while the queue runs, once, in order; what cannot be taken in waits
/// or is set aside, and loses nothing.
@Suite("Persistent queue: operations added by other processes", .timeLimit(.minutes(1)))
struct InboxLetterTests {
    /// Waits up to `timeout` seconds for `condition`, looking every 10 ms (and once more after
    /// the deadline: on a loaded machine this task may resume late).
    static func eventually(timeout: TimeInterval = 30, _ condition: () throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return try condition()
    }

    @Test func operationsLeftBeforeTheAppRunsAreTakenInByRestoreAndRunOnce() async throws {
        // Given an extension that left two adds while the app was not running (no store yet)
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let inbox = PersistentOperationInbox(directory: directory.store, producer: "share-extension")
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "first", journal: journal)), options: EnqueueOptions(tags: ["shared"]))
        try inbox.addOperations([PlainNote(payload: UploadPayload(name: "second", journal: journal)), PlainNote(payload: UploadPayload(name: "third", journal: journal))])
        #expect(inbox.waitingCount == 2)

        // When the app opens its queue: nothing is taken in before restore()
        let fixture = try QueueFixture(directory: directory, journal: journal)
        try await Task.sleep(for: .milliseconds(50))
        #expect(inbox.waitingCount == 2 && fixture.lines.isEmpty)
        let report = try fixture.queue.restore()

        // Then restore took them in, as adds of this launch, with their options, and each runs once
        #expect(report.restored.isEmpty)
        #expect(inbox.waitingCount == 0)
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["first ran", "second ran", "third ran"])
        let enqueued = fixture.deliveredEvents().compactMap { event -> PersistentOperationID? in
            if case .enqueued(let id, _) = event { return id } else { return nil }
        }
        #expect(enqueued.count == 3)
        #expect(try fixture.pendingRecords().isEmpty)
        fixture.queue.close()
        // And a relaunch takes nothing in again
        let again = try QueueFixture(directory: directory, journal: journal)
        _ = try again.queue.restore()
        await again.queue.allOperationsFinished()
        #expect(again.lines == ["first ran", "second ran", "third ran"])
    }

    @Test func aRunningQueueTakesInEachAddAsItArrivesAndKeepsAProducersOrderInALane() async throws {
        // Given a running queue of four concurrent slots
        let fixture = try QueueFixture(maxConcurrent: 4)
        _ = try fixture.queue.restore()

        // When an extension adds ten operations one at a time, all in one lane
        let inbox = PersistentOperationInbox(directory: fixture.directory.store, producer: "intent")
        for index in 1...10 {
            try inbox.addOperation(fixture.note("message-\(index)"), options: EnqueueOptions(lane: "chat"))
        }

        // Then the queue takes each in (it watches the inbox) and they run in the order added
        #expect(await Self.eventually { fixture.lines.count == 10 })
        #expect(fixture.lines == (1...10).map { "message-\($0) ran" })
        #expect(inbox.waitingCount == 0)
        await fixture.queue.allOperationsFinished()
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aBatchKeepsItsDependenciesAndPriorities() async throws {
        // Given a batch whose first member depends on the second, the third with a high priority
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let last = PlainNote(payload: UploadPayload(name: "publish", journal: journal))
        let first = PlainNote(payload: UploadPayload(name: "create", journal: journal))
        let urgent = PlainNote(payload: UploadPayload(name: "urgent", journal: journal))
        last.addDependency(first)
        urgent.queuePriority = .veryHigh
        try PersistentOperationInbox(directory: directory.store).addOperations([last, first, urgent])

        // When the app restores, with its operation queue suspended until everything is in
        let fixture = try QueueFixture(suspended: true, directory: directory, journal: journal)
        _ = try fixture.queue.restore()
        let infos = fixture.queue.operations()
        fixture.queue.operationQueue.isSuspended = false
        await fixture.queue.allOperationsFinished()

        // Then the dependent ran after its prerequisite, and the stored priorities are the batch's
        #expect(infos.count == 3)
        let lines = fixture.lines
        #expect(lines.firstIndex(of: "create ran")! < lines.firstIndex(of: "publish ran")!)
        #expect(Set(infos.map(\.priority)) == [.normal, .veryHigh])
    }

    @Test func aLetterStoredButNotRemovedBeforeACrashIsNotStoredTwice() async throws {
        // Given a letter, and an earlier launch that stored its operation under the letter's key
        // and was killed before it removed the letter (its operation never started)
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let storeInbox = StoreInbox(directory: directory.store)
        let inbox = PersistentOperationInbox(directory: directory.store)
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "once", journal: journal)))
        let name = try #require(storeInbox.letterNames().first)
        let events = Locked<[PersistentOperationEvent]>([])
        try QueueFixture.earlierLaunch(directory, clock: ManualRetryScheduler(), events: events) { queue in
            _ = try queue.addOperations([PlainNote(payload: UploadPayload(name: "once", journal: journal))], options: EnqueueOptions(idempotencyKey: "inbox:" + name))
        }
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.count == 1)

        // When the next launch restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        let report = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()

        // Then the letter is removed, the stored operation restored, and it ran once
        #expect(inbox.waitingCount == 0)
        #expect(report.restored.count == 1)
        #expect(fixture.lines == ["once ran"])
    }

    @Test func aLetterOfAnUnregisteredTypeWaitsWithItsProducersLaterLettersAndOthersGoOn() async throws {
        // Given letters from two producers; the first of "widget" names a type the app has not registered
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let widget = PersistentOperationInbox(directory: directory.store, producer: "widget")
        let intent = PersistentOperationInbox(directory: directory.store, producer: "intent")
        try widget.addOperation(fixtureUpload("widget-1", journal), options: EnqueueOptions(lane: "w"))
        try widget.addOperation(PlainNote(payload: UploadPayload(name: "widget-2", journal: journal)), options: EnqueueOptions(lane: "w"))
        try intent.addOperation(PlainNote(payload: UploadPayload(name: "intent-1", journal: journal)))

        // When an app that registers only PlainNote restores
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        let operationQueue = OperationQueue()
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: .init(scheduler: clock))
        queue.register(PlainNote.self)
        queue.eventHandler = { event in events.withLock { $0.append(event) } }
        _ = try queue.restore()
        await queue.allOperationsFinished()

        // Then the other producer's operation ran, and both of "widget"'s letters wait
        #expect(Journal.lines(journal) == ["intent-1 ran"])
        #expect(widget.waitingCount == 2)
        queue.close()

        // When a later version of the app, which registers the type, restores
        let later = try QueueFixture(directory: directory, journal: journal)
        _ = try later.queue.restore()
        await later.queue.allOperationsFinished()

        // Then both are taken in and run in their order
        #expect(later.lines == ["intent-1 ran", "widget-1#1 retry=false retries=0", "widget-2 ran"])
        #expect(widget.waitingCount == 0)
    }

    @Test func anUnreadableLetterAndAPayloadThatDoesNotDecodeAreSetAsideAndTheNextIsTakenIn() async throws {
        // Given a letter of garbage, one whose payload the registered type cannot decode, and a good one
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let storeInbox = StoreInbox(directory: directory.store)
        let inbox = PersistentOperationInbox(directory: directory.store)
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "placeholder", journal: journal)))
        let garbage = try #require(storeInbox.letterNames().first)
        try Data("not a letter".utf8).write(to: URL(fileURLWithPath: storeInbox.path + "/" + garbage + ".letter"))
        try inbox.addOperation(OtherShape(payload: .init(count: 3)))   // read as a ScriptedUpload: does not decode
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "good", journal: journal)))

        // When the app restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        _ = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()

        // Then the good one ran, and the two others are kept, set aside, never taken in
        #expect(fixture.lines == ["good ran"])
        #expect(inbox.waitingCount == 0)
        #expect(storeInbox.rejectedLetterNames().count == 2)
        #expect(storeInbox.rejectedLetterNames().first == garbage)
        #expect(try Data(contentsOf: URL(fileURLWithPath: storeInbox.path + "/" + garbage + ".rejected")) == Data("not a letter".utf8))
    }

    @Test func whatAnInboxCannotTakeThrowsAndLeavesNothing() throws {
        // Given an inbox
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let inbox = PersistentOperationInbox(directory: directory.store)
        let note = PlainNote(payload: UploadPayload(name: "n", journal: journal))

        // When it is given a unique key, a repeat schedule, a dependency outside the add, a
        // cycle, and an empty idempotency key
        let unique = #expect(throws: PersistenceError.self) { try inbox.addOperation(note, options: EnqueueOptions(uniqueKey: "k")) }
        let repeating = #expect(throws: PersistenceError.self) { try inbox.addOperation(note, options: EnqueueOptions(repeating: .every(60))) }
        let outside = PlainNote(payload: UploadPayload(name: "o", journal: journal))
        let dependent = PlainNote(payload: UploadPayload(name: "d", journal: journal))
        dependent.addDependency(outside)
        let dependency = #expect(throws: PersistenceError.self) { try inbox.addOperation(dependent) }
        let a = PlainNote(payload: UploadPayload(name: "a", journal: journal))
        let b = PlainNote(payload: UploadPayload(name: "b", journal: journal))
        a.addDependency(b)
        b.addDependency(a)
        let cycle = #expect(throws: PersistenceError.self) { try inbox.addOperations([a, b]) }
        let key = #expect(throws: PersistenceError.self) { try inbox.addOperation(note, options: EnqueueOptions(idempotencyKey: "")) }

        // Then each throws a clear error, and nothing is left for the queue
        #expect(unique?.code == .invalidOptions && repeating?.code == .invalidOptions && key?.code == .invalidOptions)
        #expect(dependency?.code == .invalidDependency && cycle?.code == .invalidDependency)
        #expect(inbox.waitingCount == 0)
    }

    @Test func aPayloadThatCannotBeEncodedThrowsAndLeavesNothing() throws {
        let directory = try TemporaryDirectory()
        let inbox = PersistentOperationInbox(directory: directory.store)
        let error = #expect(throws: PersistenceError.self) { try inbox.addOperation(UnencodableNote()) }
        #expect(error?.code == .payloadNotEncodable)
        #expect(inbox.waitingCount == 0)
    }

    @Test func aFailedWriteThrowsAndLeavesNoLetterAndTheEarlierLettersSurvive() async throws {
        // Given an inbox with one letter, over a disk that then fails writes
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let injector = FaultInjector()
        let inbox = PersistentOperationInbox(directory: directory.store, producer: "widget", fileSystem: injector.fileSystem)
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "kept", journal: journal)))
        injector.faults.withLock { $0.write = ENOSPC }

        // When another add is made
        let error = #expect(throws: PersistenceError.self) {
            try inbox.addOperation(PlainNote(payload: UploadPayload(name: "lost", journal: journal)))
        }

        // Then it throws writeFailed, leaves no letter nor temporary file, and the earlier one is taken in
        #expect(error?.code == .writeFailed)
        #expect(inbox.waitingCount == 1)
        #expect(try directory.names(in: "inbox").count == 1)
        let fixture = try QueueFixture(directory: directory, journal: journal)
        _ = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["kept ran"])
    }

    @Test func restoreRemovesTheTemporaryFilesOfWritesThatNeverFinishedOnceTheyAreAnHourOld() throws {
        // Given an inbox where a producer killed while writing left a temporary file two hours
        // ago, and another producer is writing one now
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let inbox = PersistentOperationInbox(directory: directory.store)
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "kept", journal: journal)))
        let storeInbox = StoreInbox(directory: directory.store)
        let stale = storeInbox.path + "/.0000000000000001-DEAD.letter.999-1.tmp"
        let fresh = storeInbox.path + "/.0000000000000002-LIVE.letter.998-1.tmp"
        for file in [stale, fresh] { try Data("half a letter".utf8).write(to: URL(fileURLWithPath: file)) }
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7_200)], ofItemAtPath: stale)

        // When the app restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        _ = try fixture.queue.restore()

        // Then the old one is gone, the young one stays, and the letter was taken in
        #expect(!FileManager.default.fileExists(atPath: stale))
        #expect(FileManager.default.fileExists(atPath: fresh))
        #expect(inbox.waitingCount == 0)
    }

    @Test func aQueueConfiguredNotToTakeOperationsLeavesThemWaiting() async throws {
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let inbox = PersistentOperationInbox(directory: directory.store)
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "waits", journal: journal)))
        var configuration = PersistentOperationQueue.Configuration()
        configuration.takesOperationsFromOtherProcesses = false
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        queue.register(PlainNote.self)
        _ = try queue.restore()
        try inbox.addOperation(PlainNote(payload: UploadPayload(name: "waits too", journal: journal)))
        try await Task.sleep(for: .milliseconds(100))
        await queue.allOperationsFinished()
        #expect(Journal.lines(journal).isEmpty && inbox.waitingCount == 2)
        queue.close()
    }

    private func fixtureUpload(_ name: String, _ journal: String) -> ScriptedUpload {
        ScriptedUpload(payload: UploadPayload(name: name, journal: journal))
    }
}

/// A note whose payload throws when encoded.
private final class UnencodableNote: Operation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable {
        func encode(to encoder: any Encoder) throws {
            throw EncodingError.invalidValue(self, .init(codingPath: [], debugDescription: "never encodable"))
        }
        init() {}
    }

    static let persistenceIdentifier = "test.unencodable-note"
    let payload: Payload

    init(payload: Payload = Payload()) {
        self.payload = payload
    }
}
