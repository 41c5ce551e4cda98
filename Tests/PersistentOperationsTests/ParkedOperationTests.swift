import Foundation
import Testing
@testable import PersistentOperations

/// An added operation that waits is held weakly: the app's references keep the very object,
/// and once there are none it is built again from its record (see `+Release`).
@Suite("Persistent queue: operations parked while they wait", .timeLimit(.minutes(1)))
struct ParkedOperationTests {
    final class WeakReference<Object: AnyObject> {
        weak var object: Object?
        init(_ object: Object) { self.object = object }
    }

    /// Adds what `make` returns from a scope of its own (the test keeps no reference to it);
    /// returns a weak reference to it and its identifier.
    private static func addDropping<Op: Operation & PersistentOperation>(
        _ make: () -> Op, to queue: PersistentOperationQueue, options: EnqueueOptions
    ) throws -> (reference: WeakReference<Op>, id: PersistentOperationID) {
        let operation = make()
        let id = try queue.addOperation(operation, options: options).id
        return (WeakReference(operation), id)
    }

    @Test func aWaitingOperationTheAppLetsGoOfIsReleasedAndRunsRebuiltWhenDue() async throws {
        // Given an upload added to run in a minute, which the app does not keep
        let fixture = try QueueFixture()
        let start = fixture.clock.now
        let added = try Self.addDropping({ fixture.upload("later") }, to: fixture.queue, options: EnqueueOptions(notBefore: start.addingTimeInterval(60)))
        // Then the queue does not keep it alive either
        #expect(added.reference.object == nil)
        #expect(fixture.queue.operation(withID: added.id)?.state == .scheduled)

        // When it is due, it runs, built again from its record, and succeeds
        fixture.clock.advance(by: 60)
        #expect(try await eventually { fixture.deliveredEvents().contains(.succeeded(added.id)) })
        #expect(fixture.lines == ["later#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func aWaitingOperationTheAppHoldsIsTheOneThatRuns() async throws {
        // Given an upload added to run in a minute, which the app keeps and names after adding it
        let fixture = try QueueFixture()
        let upload = fixture.upload("held")
        let id = try fixture.queue.addOperation(upload, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60))).id
        upload.name = "set after the add"
        // Then the queue knows it by that object while it waits
        #expect(fixture.queue.identifier(of: upload) == id)

        // When it is due, that very object runs and finishes
        fixture.clock.advance(by: 60)
        #expect(try await eventually { upload.isFinished })
        #expect({ if case .succeeded? = upload.outcome { return true } else { return false } }())
        #expect(upload.name == "set after the add")
        #expect(fixture.lines == ["held#1 retry=false retries=0"])
    }

    @Test func keepsOperationAliveHoldsAWaitingOperationUntilItRuns() async throws {
        // Given an upload added to run in a minute with keepsOperationAlive, not kept by the app
        let fixture = try QueueFixture()
        let options = EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60), keepsOperationAlive: true)
        let added = try Self.addDropping({ fixture.upload("kept") }, to: fixture.queue, options: options)
        // Then the queue holds it, and it is the object that runs
        let upload = try #require(added.reference.object)
        fixture.clock.advance(by: 60)
        #expect(try await eventually { upload.isFinished })
        #expect(fixture.queue.identifier(of: upload) == nil)   // finished: no longer tracked
        #expect(fixture.lines == ["kept#1 retry=false retries=0"])
    }

    @Test func anOperationCancelledWhileParkedFinishesCancelledAfterTheAppLetsGoOfIt() async throws {
        // Given an upload added to run in a minute, which the app cancels and then lets go of
        let fixture = try QueueFixture()
        let added = try Self.addDropping({ () -> ScriptedUpload in
            fixture.upload("cancelled")
        }, to: fixture.queue, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60)))
        #expect(added.reference.object == nil)
        let cancelled = try Self.addDropping({ () -> ScriptedUpload in
            fixture.upload("cancelled-held")
        }, to: fixture.queue, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60), keepsOperationAlive: true))
        // (a parked one the app still holds: cancelled through its own object)
        let held = fixture.upload("parked")
        let heldID = try fixture.queue.addOperation(held, options: EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60))).id
        let reference = WeakReference(held)
        held.cancel()
        _ = consume held
        // Then the queue holds the cancelled object again
        #expect(reference.object != nil)

        // When it is due, it finishes cancelled without an attempt, and its record goes
        fixture.clock.advance(by: 60)
        #expect(try await eventually { fixture.deliveredEvents().contains(.cancelled(heldID)) })
        #expect(!fixture.lines.contains { $0.hasPrefix("parked#") })
        #expect(try await eventually { try !fixture.pendingRecords().contains { $0.id == heldID.rawValue } })
        // And the others, never cancelled, ran
        #expect(try await eventually {
            fixture.deliveredEvents().contains(.succeeded(added.id)) && fixture.deliveredEvents().contains(.succeeded(cancelled.id))
        })
    }

    /// Adds `count` uploads (`u0`, `u1`, …) at once, keeping none of them: weak references.
    static func addUnkeptUploads(_ count: Int, to fixture: QueueFixture) throws -> [WeakReference<ScriptedUpload>] {
        let uploads = (0..<count).map { fixture.upload("u\($0)") }
        _ = try fixture.queue.addOperations(uploads)
        return uploads.map(WeakReference.init)
    }

    @Test func aBacklogBehindAFullWindowIsHeldByItsRecordsAndRunsWhole() async throws {
        // Given a suspended queue, one attempt at a time, and 300 uploads added at once that
        // the app does not keep
        let fixture = try QueueFixture(suspended: true)
        let references = try Self.addUnkeptUploads(300, to: fixture)
        // Then only those given a slot are held: the rest wait as records
        let alive = references.filter { $0.object != nil }.count
        #expect(alive <= fixture.queue.slotWindow())
        #expect(alive < 300)

        // When the queue runs, every one of them runs once
        fixture.queue.operationQueue.isSuspended = false
        #expect(try await eventually(seconds: 30) { try fixture.lines.count == 300 && fixture.pendingRecords().isEmpty })
        #expect(Set(fixture.lines).count == 300)
    }

    @Test func theEntriesOfParkedOperationsTheAppLetGoOfAreHeldCompactOnceLaterAddsLookAtThem() async throws {
        // Given a suspended queue, one attempt at a time, and 300 uploads added at once that
        // the app does not keep (a window of them given slots, the rest parked)
        let fixture = try QueueFixture(suspended: true)
        let references = try Self.addUnkeptUploads(300, to: fixture)
        let gone = references.filter { $0.object == nil }.count
        #expect(gone > 0)
        let before = fixture.queue.state.withLock { (compact: $0.entries.compactCount, keys: $0.idsByOperation.count) }
        #expect(before.compact == 0)

        // When the app adds more, one at a time (each add looks at a few whole entries)
        for index in 0..<200 {
            try fixture.queue.addOperation(fixture.upload("later\(index)"))
        }

        // Then the entries of the uploads that are gone keep no key of them and are held
        // compact; those given slots, and the later ones the app still held, are whole
        let after = fixture.queue.state.withLock { (compact: $0.entries.compactCount, keys: $0.idsByOperation.count) }
        #expect(after.compact >= gone)
        #expect(after.keys <= before.keys + 200 - gone)

        // And when the queue runs, every one of them runs once, in the order added
        fixture.queue.operationQueue.isSuspended = false
        #expect(try await eventually(seconds: 30) { try fixture.lines.count == 500 && fixture.pendingRecords().isEmpty })
        #expect(fixture.lines.map { $0.components(separatedBy: "#")[0] } == (0..<300).map { "u\($0)" } + (0..<200).map { "later\($0)" })
    }

    @Test func operationsWithACompletionBlockDependenciesOrNoObservableCancelAreNotParked() async throws {
        // Given, all due in a minute and none kept by the app: an upload with a completion
        // block, an upload with a dependency, and a plain operation
        let fixture = try QueueFixture()
        let later = EnqueueOptions(notBefore: fixture.clock.now.addingTimeInterval(60))
        let completed = Locked(false)
        let withBlock = try Self.addDropping({ () -> ScriptedUpload in
            let upload = fixture.upload("with-block")
            upload.completionBlock = { completed.withLock { $0 = true } }
            return upload
        }, to: fixture.queue, options: later)
        let prerequisite = fixture.upload("first")
        try fixture.queue.addOperation(prerequisite, options: later)
        let dependent = try Self.addDropping({ () -> ScriptedUpload in
            let upload = fixture.upload("second")
            upload.addDependency(prerequisite)
            return upload
        }, to: fixture.queue, options: later)
        let plain = try Self.addDropping({ fixture.note("plain") }, to: fixture.queue, options: later)
        // Then the queue holds each of them
        #expect(withBlock.reference.object != nil && dependent.reference.object != nil && plain.reference.object != nil)

        // And when they are due, they run, and the completion block is called
        fixture.clock.advance(by: 60)
        #expect(try await eventually { completed.withLock { $0 } && fixture.lines.contains("plain ran") && fixture.lines.contains { $0.hasPrefix("second#1") } })
    }
}
