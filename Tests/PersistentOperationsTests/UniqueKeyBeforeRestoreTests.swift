import Foundation
import Testing
@testable import PersistentOperations

/// Adds with a unique key made by a launch before it calls `restore()`: they see the records
/// the earlier launch left pending. "A launch" is a queue over the store; closing it releases
/// the lock and leaves its records as a killed process would.
@Suite("Persistent queue: unique keys before restore", .timeLimit(.minutes(1)))
struct UniqueKeyBeforeRestoreTests {
    /// The next launch on the same store, its `OperationQueue` suspended until the test resumes it.
    func relaunch(_ fixture: QueueFixture, fileSystem: FileSystem = .system) throws -> QueueFixture {
        fixture.queue.close()
        return try QueueFixture(suspended: true, directory: fixture.directory, fileSystem: fileSystem, journal: fixture.journal)
    }

    @Test func keepingTheExistingOperationBeforeRestoreKeepsTheStoredOneWhichRunsInItsPlaceAfterRestore() async throws {
        // Given a launch that left pending an operation with the key "sync-album", an urgent
        // one and a later one
        let first = try QueueFixture(suspended: true)
        let stored = try first.queue.addOperation(first.upload("stored"), options: EnqueueOptions(uniqueKey: "sync-album"))
        let urgent = first.upload("urgent")
        urgent.queuePriority = .high
        try first.queue.addOperation(urgent)
        try first.queue.addOperation(first.upload("later"))

        // When the next launch adds another operation with that key, keeping the existing
        // one, before it calls restore()
        let second = try relaunch(first)
        let result = try second.queue.addOperation(second.upload("newcomer"), options: EnqueueOptions(uniqueKey: "sync-album"))

        // Then the stored operation is kept, and the newcomer is not stored
        #expect(result == EnqueueResult(id: stored.id, disposition: .keptExisting))
        #expect(try second.pendingRecords().count == 3)
        // And restore resumes the stored operation instead of removing it as replaced
        let report = try second.queue.restore()
        #expect(report.removedAsReplaced.isEmpty)
        #expect(report.restored.count == 3 && report.restored.contains(stored.id))
        #expect(second.queue.operation(withUniqueKey: "sync-album")?.id == stored.id)
        // And everything runs in priority, then enqueue, order; the newcomer never runs
        second.queue.isSuspended = false
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["urgent#1 retry=false retries=0", "stored#1 retry=false retries=0", "later#1 retry=false retries=0"])
        // And nothing was enqueued or cancelled
        let events = second.deliveredEvents()
        #expect(!events.contains { if case .cancelled = $0 { return true }; return false })
        #expect(!events.contains { if case .enqueued = $0 { return true }; return false })
        #expect(try second.pendingRecords().isEmpty)
    }

    @Test func replacingTheExistingOperationBeforeRestoreRemovesTheStoredOneAndItsDependentsDeepestFirst() async throws {
        // Given a launch that left pending an operation with the key "sync-album", a child
        // (with its own key) and a grandchild waiting for it, and an unrelated operation
        let first = try QueueFixture(suspended: true)
        let old = first.upload("old")
        let stored = try first.queue.addOperation(old, options: EnqueueOptions(uniqueKey: "sync-album"))
        let child = first.upload("child")
        child.addDependency(old)
        let storedChild = try first.queue.addOperation(child, options: EnqueueOptions(uniqueKey: "child-key"))
        let grandchild = first.upload("grandchild")
        grandchild.addDependency(child)
        let storedGrandchild = try first.queue.addOperation(grandchild, options: EnqueueOptions())
        try first.queue.addOperation(first.upload("other"))

        // When the next launch replaces the operation with that key before it calls restore()
        let second = try relaunch(first)
        let result = try second.queue.addOperation(
            second.upload("replacement"), options: EnqueueOptions(uniqueKey: "sync-album", ifUniqueKeyExists: .replaceExisting)
        )

        // Then the replacement is stored, and the stored operation is gone with its dependents,
        // each reported cancelled, deepest first
        #expect(result.disposition == .replaced(stored.id))
        let pending = try second.pendingRecords()
        #expect(pending.count == 2)
        #expect(pending.contains { $0.id == result.id.rawValue && $0.uniqueKey == "sync-album" })
        #expect(pending.contains { $0.uniqueKey == nil && $0.prerequisites.isEmpty })
        let events = second.deliveredEvents()
        #expect(events == [
            .enqueued(result.id, typeIdentifier: ScriptedUpload.persistenceIdentifier),
            .abandoned(storedGrandchild.id, prerequisite: storedChild.id),
            .cancelled(storedGrandchild.id),
            .abandoned(storedChild.id, prerequisite: stored.id),
            .cancelled(storedChild.id),
            .cancelled(stored.id),
        ])
        // And the child's key is free again
        let again = try second.queue.addOperation(second.upload("child-again"), options: EnqueueOptions(uniqueKey: "child-key"))
        #expect(again.disposition == .added)

        // When it restores
        let report = try second.queue.restore()
        // Then only the unrelated operation is restored, and nothing is removed as replaced
        #expect(report.restored.count == 1)
        #expect(report.removedAsReplaced.isEmpty && report.failedWithTheirPrerequisites.isEmpty)
        second.queue.isSuspended = false
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["replacement#1 retry=false retries=0", "child-again#1 retry=false retries=0", "other#1 retry=false retries=0"])
        let cancelled = second.deliveredEvents().filter { if case .cancelled = $0 { return true }; return false }
        #expect(cancelled.count == 3)
        #expect(try second.pendingRecords().isEmpty)
    }

    @Test func onlyTheFirstAddWithAUniqueKeyReadsTheStoredRecords() async throws {
        // Given a launch that left an operation with a key pending, and a next launch that
        // counts the reads of stored records (`pread`s from the journal)
        let first = try QueueFixture(suspended: true)
        try first.queue.addOperation(first.upload("stored"), options: EnqueueOptions(uniqueKey: "k0"))
        let listings = Locked(0)
        let second = try relaunch(first, fileSystem: .countingReads(listings))

        // When it adds operations without a key, then with keys, then without, before restore
        for index in 0..<3 { try second.queue.addOperation(second.upload("plain\(index)")) }
        let afterPlain = listings.withLock { $0 }
        for index in 1...3 {
            try second.queue.addOperation(second.upload("keyed\(index)"), options: EnqueueOptions(uniqueKey: "k\(index)"))
        }
        let afterKeyed = listings.withLock { $0 }
        try second.queue.addOperation(second.upload("plain-again"))
        let kept = try second.queue.addOperation(second.upload("duplicate"), options: EnqueueOptions(uniqueKey: "k0"))

        // Then the stored keys were read once, by the first add with a key: the records
        // stored by then (the one left, and the three plain adds) lie together in the
        // journal's segment, and are read in one window
        #expect(afterKeyed == afterPlain + 1)
        #expect(listings.withLock { $0 } == afterKeyed)
        #expect(kept.disposition == .keptExisting)
        second.queue.cancelAllOperations()
        await second.queue.allOperationsFinished()
    }
}
