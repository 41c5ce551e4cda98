import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Compaction of the journal: it shrinks the journal to its live records, loses nothing while
/// changes go on, and a change made while it copies keeps its meaning.
@Suite(.timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct JournalCompactionTests {
    @Test
    func compactionShrinksAJournalOfRemovedRecords() async throws {
        // Given 10,000 records added and then removed (at the process-crash level, to spare
        // the disk 10,000 flushes)
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(durability: .processCrash, compactsAutomatically: false)
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        let count = isRunningUnderThreadSanitizer ? 2_000 : 10_000
        // (Twenty thousand changes and a compaction without a pause: on a thread of their own,
        // not one of the few threads that run every test)
        let before = try await onDedicatedThread { () -> Int in
            var ids: [String] = []
            for index in 0..<count {
                let record = try makeRecord(index: index)
                try store.add(record)
                ids.append(record.id)
            }
            for id in ids { try store.removePending(id: id) }
            return try Self.sizeOnDisk(directory)
        }

        // When the journal is compacted
        try await onDedicatedThread { try store.compact() }

        // Then it is under 64 KB, on disk too, and still empty after reopening
        let after = try Self.sizeOnDisk(directory)
        #expect(store.journalSize < 64 << 10)
        #expect(after < 64 << 10)
        store.close()
        let reopened = try JournalStore(directory: directory.store, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened.pendingCount == 0)
        #expect(reopened.openReport.quarantined.isEmpty)
        print("journal compaction: \(count) records added and removed, \(before) bytes on disk before, \(after) after")
    }

    @Test
    func aStoreWhoseRecordsHaveAllGoneStartsOverSmallByItself() throws {
        // Given a store compacting by itself, 3,000 records added and then removed one by one
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(durability: .processCrash, segmentSize: 256 << 10)
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        var ids: [String] = []
        for index in 0..<3_000 {
            let record = try makeRecord(index: index)
            try store.add(record)
            ids.append(record.id)
        }
        let full = try Self.sizeOnDisk(directory)
        for id in ids { try store.removePending(id: id) }
        // When the last removal has been written and the compactions it started have run
        store.close()   // waits for a compaction under way
        // Then the journal is back to a segment header or two, without anyone asking
        let segments = try directory.names(in: "journal").filter { $0.hasSuffix(".segment") }
        let after = try Self.sizeOnDisk(directory)
        #expect(segments.count <= 2, "\(segments.sorted())")
        #expect(after < 64 << 10, "\(after) bytes")
        // And it reopens empty, and takes records again
        let reopened = try JournalStore(directory: directory.store, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened.pendingCount == 0 && reopened.openReport.quarantined.isEmpty)
        let record = try makeRecord(index: 1)
        try reopened.add(record)
        #expect(try reopened.readPending(id: record.id) == record)
        print("drained journal: \(full) bytes with 3,000 records, \(after) once all were removed, \(segments.count) segment files")
    }

    @Test
    func compactionKeepsLiveRecordsAndTheirAreas() throws {
        // Given a journal of several segments holding pending, failed, rewritten and batched
        // records among removed ones
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(segmentSize: 8 << 10, compactsAutomatically: false)
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        var expectedPending: [String: OperationRecord] = [:]
        var expectedFailed: [String: OperationRecord] = [:]
        for index in 0..<60 {
            var record = try makeRecord(index: index)
            try store.add(record)
            switch index % 4 {
            case 0: try store.removePending(id: record.id)
            case 1:
                record.numberOfRetries = 2
                try store.update(record)
                expectedPending[record.id] = record
            case 2: expectedFailed[record.id] = try store.moveToFailed(record, reason: "no")
            default: expectedPending[record.id] = record
            }
        }
        let batch = try (100..<103).map { try makeRecord(index: $0) }
        try store.addBatch(batch)
        try store.removePending(id: batch[1].id)
        for record in [batch[0], batch[2]] { expectedPending[record.id] = record }

        // When it is compacted, twice (the second merges the first's segment)
        try store.compact()
        try store.compact()

        // Then every live record reads back the same, in its area, before and after reopening
        for reopen in [false, true] {
            let current = reopen ? try JournalStore(directory: directory.store, configuration: configuration) : store
            for (id, record) in expectedPending { #expect(try current.readPending(id: id) == record) }
            for (id, record) in expectedFailed { #expect(try current.readFailed(id: id) == record) }
            #expect(current.pendingCount == expectedPending.count)
            #expect(current.failedCount == expectedFailed.count)
            current.close()
        }
        #expect(try JournalStoreTests.segmentPaths(in: directory).count == 2)
    }

    @Test
    func compactionLosesNothingUnderConcurrentChanges() async throws {
        // Given a journal with small segments that compacts by itself
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(
            durability: .processCrash, segmentSize: 16 << 10, compactionMinimumSize: 32 << 10
        )
        let store = try JournalStore(directory: directory.store, configuration: configuration)

        // When 4 threads add 400 records each and remove every other one, while another
        // thread keeps asking for compactions
        let perThread = isRunningUnderThreadSanitizer ? 100 : 400
        let kept = Locked<[String: OperationRecord]>([:])
        let done = Locked(false)
        let compactor = Thread {
            while !done.withLock({ $0 }) { try? store.compact() }
        }
        compactor.start()
        await runOnThreads(4) { thread in
            for index in 0..<perThread {
                let record = try! makeRecord(index: thread * 10_000 + index)
                try! store.add(record)
                if index % 2 == 0 {
                    try! store.removePending(id: record.id)
                } else {
                    kept.withLock { $0[record.id] = record }
                }
            }
        }
        done.withLock { $0 = true }
        try store.compact()

        // Then exactly the kept records are pending, read back equal, before and after reopening
        let expected = kept.withLock { $0 }
        #expect(store.compactionCount > 1)
        for reopen in [false, true] {
            let current = reopen ? try JournalStore(directory: directory.store, configuration: configuration) : store
            let records = try current.loadPending().records
            #expect(records.count == expected.count)
            #expect(Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0) }) == expected)
            current.close()
        }
    }

    @Test
    func aRemovalWrittenWhileARecordIsCopiedWins() throws {
        // Given a journal whose first compaction stops when it starts writing its new
        // segment, after it took the records to copy, until the test lets it go on
        let directory = try TemporaryDirectory()
        let copying = DispatchSemaphore(value: 0)
        let removed = DispatchSemaphore(value: 0)
        let isFirst = Locked(true)
        var fileSystem = FileSystem.system
        fileSystem.open = { path, flags, mode in
            if path.hasSuffix(JournalSegmentName.temporaryFileName), isFirst.withLock({ first in defer { first = false }; return first }) {
                copying.signal()
                removed.wait()
            }
            return try FileSystem.system.open(path, flags, mode)
        }
        let configuration = JournalStore.Configuration(compactsAutomatically: false, fileSystem: fileSystem)
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        let record = try makeRecord(index: 1)
        let other = try makeRecord(index: 2)
        try store.add(record)
        try store.add(other)

        // When the record is removed while the compaction copies it
        let finished = DispatchSemaphore(value: 0)
        Thread {
            try? store.compact()
            finished.signal()
        }.start()
        copying.wait()
        try store.removePending(id: record.id)
        removed.signal()
        finished.wait()

        // Then the compaction completed, the record stays removed, before and after
        // reopening, and the other record is kept
        #expect(store.compactionCount == 1)
        #expect(throws: PersistenceError.self) { try store.readPending(id: record.id) }
        #expect(try store.readPending(id: other.id) == other)
        store.close()
        let reopened = try JournalStore(directory: directory.store, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened.pendingCount == 1)
        #expect(try reopened.readPending(id: other.id) == other)
    }

    @Test
    func aFullDiskDuringCompactionLosesNothing() throws {
        // Given a journal whose disk fills up while compaction writes its new segment
        let directory = try TemporaryDirectory()
        let isFull = Locked(true)
        let compactionDescriptors = Locked<Set<Int32>>([])
        var fileSystem = FileSystem.system
        fileSystem.open = { path, flags, mode in
            let descriptor = try FileSystem.system.open(path, flags, mode)
            if path.hasSuffix(JournalSegmentName.temporaryFileName) { compactionDescriptors.withLock { _ = $0.insert(descriptor) } }
            return descriptor
        }
        fileSystem.writeAt = { descriptor, bytes, offset in
            if isFull.withLock({ $0 }), compactionDescriptors.withLock({ $0.contains(descriptor) }) {
                throw SystemCallError("pwrite", code: ENOSPC)
            }
            return try FileSystem.system.writeAt(descriptor, bytes, offset)
        }
        let configuration = JournalStore.Configuration(compactsAutomatically: false, fileSystem: fileSystem)
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        let records = try (0..<3).map { try makeRecord(index: $0) }
        for record in records { try store.add(record) }
        try store.removePending(id: records[0].id)

        // When it compacts
        #expect(throws: PersistenceError.self) { try store.compact() }

        // Then nothing is lost, no temporary file is left, and the store goes on: a later
        // compaction, with room on the disk, succeeds
        #expect(store.pendingCount == 2)
        #expect(!FileManager.default.fileExists(atPath: directory.path("journal", JournalSegmentName.temporaryFileName)))
        try store.add(try makeRecord(index: 3))
        isFull.withLock { $0 = false }
        try store.compact()
        store.close()
        let reopened = try JournalStore(directory: directory.store, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened.pendingCount == 3)
        #expect(try reopened.readPending(id: records[1].id) == records[1])
    }

    @Test
    func aCompactionLeftHalfDoneReadsTheSameAndIsTidiedAtOpen() throws {
        // Given a journal whose compaction segment was written but whose old segments a crash
        // left in place (copied back after the compaction)
        let directory = try TemporaryDirectory()
        let configuration = JournalStore.Configuration(compactsAutomatically: false)
        let records = try (0..<4).map { try makeRecord(index: $0) }
        var saved: [String: Data] = [:]
        do {
            let store = try JournalStore(directory: directory.store, configuration: configuration)
            for record in records { try store.add(record) }
            try store.removePending(id: records[0].id)
            for path in try JournalStoreTests.segmentPaths(in: directory) {
                saved[path] = try Data(contentsOf: URL(fileURLWithPath: path))
            }
            try store.compact()
            try store.removePending(id: records[1].id)
            store.close()
        }
        for (path, data) in saved { try data.write(to: URL(fileURLWithPath: path)) }

        // When it is opened
        let store = try JournalStore(directory: directory.store, configuration: configuration)
        defer { store.close() }

        // Then it reads as after the compaction and the later removal, and the replaced
        // segments are gone
        #expect(Set(try store.loadPending().records.map(\.id)) == Set(records[2...].map(\.id)))
        let names = try JournalStoreTests.segmentPaths(in: directory).map { ($0 as NSString).lastPathComponent }
        #expect(!names.contains { saved.keys.map { ($0 as NSString).lastPathComponent }.contains($0) })
    }

    static func sizeOnDisk(_ directory: TemporaryDirectory) throws -> Int {
        try JournalStoreTests.segmentPaths(in: directory).reduce(0) { total, path in
            total + (try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int)
        }
    }
}
